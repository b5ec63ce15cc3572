"""HTTP to model servers: the package's one HTTP client.

Job: opening client connections to model servers (OpenAI-compatible ones,
llama.cpp's server), sending a request, reading the answer incrementally
(whole, line by line, as server-sent events, as a stream of JSON objects) and
turning every transport failure into one of the ``Server*Error`` classes of
``_exceptions`` (``_client``); the connect and read timeouts as one typed
value (``_timeout``).  The backends, the proxy's upstream side, the
answering path's server probe and the demo's health check all go through it;
no other module opens an HTTP client connection (``tests/test_layers.py``).

May import: the leaves (``_exceptions``, ``_sse``) and ``_urls``.
Must not import: anything that retrieves, stores or generates; what a model
server's JSON means (choices, tokens, tool calls) belongs to its callers.
"""

from ._client import ModelServer, Response, snippet
from ._timeout import Timeout

__all__ = ["ModelServer", "Response", "Timeout", "snippet"]

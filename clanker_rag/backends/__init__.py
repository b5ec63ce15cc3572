"""Generation backends for :class:`~clanker_rag.RagController`.

Each backend is a ``generate(prompt, stop)`` callable.  Importing this package
imports nothing heavy: every backend module is loaded on first attribute
access, and the optional libraries (transformers, llama-cpp-python) only when
a backend that needs them is constructed.

* :class:`CompletionsBackend`, :class:`ChatBackend`, :class:`LlamaCppBackend`
  - HTTP, standard library only (OpenAI-compatible servers, llama.cpp); their
  ``timeout=`` takes seconds or a :class:`Timeout` (``connect=``, ``read=``);
* :class:`TransformersBackend` - Hugging Face transformers, reusing its KV
  cache across resumes (extra ``transformers``);
* :class:`LlamaCppPythonBackend` - llama-cpp-python in process (extra
  ``llama-cpp``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .._stream._generate import RequestStats, Token

if TYPE_CHECKING:
    from .._http import Timeout
    from ._llama_cpp_python import LlamaCppPythonBackend
    from ._openai_http import ChatBackend, CompletionsBackend, LlamaCppBackend
    from ._transformers import TransformersBackend

__all__ = [
    "ChatBackend",
    "CompletionsBackend",
    "LlamaCppBackend",
    "LlamaCppPythonBackend",
    "RequestStats",
    "Timeout",
    "Token",
    "TransformersBackend",
]

_LAZY = {
    "ChatBackend": "._openai_http",
    "CompletionsBackend": "._openai_http",
    "LlamaCppBackend": "._openai_http",
    "TransformersBackend": "._transformers",
    "LlamaCppPythonBackend": "._llama_cpp_python",
    "Timeout": ".._http",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

"""What the proxy learns about the served model: its call dialect and its control tokens.

llama.cpp's server tells both: ``GET /props`` holds the chat template (and
the BOS/EOS strings), and ``POST /tokenize`` with ``parse_special`` says
whether a string is one special token.  :func:`served_model` asks once,
through the one HTTP client (:class:`~clanker_rag._http.ModelServer`); a
server without those routes yields nothing (the proxy then uses its
configured dialect and the guard's built-in markers).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from .._exceptions import BackendError
from .._http import ModelServer
from .._stream._blocks import neutralize
from .._stream._dialects import detect_dialect

__all__ = ["ServedModel", "control_token_candidates", "served_model"]

logger = logging.getLogger(__name__)

# Token-shaped strings in a chat template: <|...|>, <...>, </...>, [UPPER_CASE], [|...|], <｜...｜>.
_CANDIDATE_RE = re.compile(
    r"<\|[^|<>\s]{1,48}\|>|</?[A-Za-z_][\w:.\-]{0,48}>|\[/?[A-Z][A-Z_]{1,30}\]|\[\|[^|\s]{1,30}\|\]|<｜[^｜\s]{1,48}｜>"
)
# At most this many strings are put to /tokenize (two requests each), once per proxy.
MAX_CANDIDATES = 32


@dataclass(frozen=True, slots=True)
class ServedModel:
    """``dialect``: the one the chat template speaks (None: it does not say); ``control_tokens``: its special tokens."""

    dialect: str | None = None
    control_tokens: tuple[str, ...] = ()


def control_token_candidates(template: str, extra: tuple[str, ...] = ()) -> list[str]:
    """Token-shaped strings of ``template`` (and ``extra``) that the guard does not already escape."""
    found: dict[str, None] = {}
    for text in (*extra, *_CANDIDATE_RE.findall(template)):
        if text and neutralize(text) == text:
            found[text] = None
    return list(found)[:MAX_CANDIDATES]


def _token_count(server: ModelServer, text: str, special: bool) -> int | None:
    try:
        answer = server.json("POST", "/tokenize", {"content": text, "parse_special": special})
    except BackendError:
        return None
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    return len(tokens) if isinstance(tokens, list) else None


def served_model(server: ModelServer) -> ServedModel:
    """Ask ``server`` (llama.cpp) for its chat template and which of its token-shaped strings are special tokens."""
    try:
        props = server.json("GET", "/props")
    except BackendError as exc:
        logger.debug("no /props at the upstream (%s): dialect and guard as configured", exc)
        return ServedModel()
    if not isinstance(props, dict):
        return ServedModel()
    template = props.get("chat_template")
    template = template if isinstance(template, str) else ""
    ends = tuple(t for t in (props.get("bos_token"), props.get("eos_token")) if isinstance(t, str) and t.strip())
    tokens: list[str] = []
    for text in control_token_candidates(template, ends):
        one = _token_count(server, text, True)
        if one is None:
            break  # no /tokenize: nothing more to learn
        # One token when parsed as special, several as plain text: a control token.
        if one == 1 and (_token_count(server, text, False) or 0) > 1:
            tokens.append(text)
    model = ServedModel(detect_dialect(template), tuple(tokens))
    logger.debug("upstream chat template speaks %s; control tokens %s", model.dialect, model.control_tokens)
    return model

"""Incremental scanner that finds ``<tool name="...">payload</tool>`` calls in a
stream of text pieces.

The model's output arrives in arbitrary pieces (tokens, SSE chunks), and a tag
may be split anywhere, even inside ``<tool``.  :class:`TagScanner` works like
an incremental decoder: :meth:`TagScanner.feed` returns the text that is safe
to show now plus the complete calls found, and :meth:`TagScanner.flush` ends the
stream.  It only ever holds back characters that may still turn into a tag, and
it never takes back text it has released.

Everything that is not a recognised call comes out byte for byte, whatever the
split.  A call is recognised when its ``name`` attribute is one of the names the
scanner was built with; any other ``<tool ...>`` is released as ordinary text.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .._validate import check_int

__all__ = ["TagScanner", "ToolCall"]

logger = logging.getLogger(__name__)

_TEXT = 0  # ordinary text; at most a few characters of a possible "<tool" held
_OPEN = 1  # inside "<tool ...", waiting for the closing ">"
_BODY = 2  # inside a recognised call, waiting for "</tool>"

_OPENER = "<tool"
_NO_EVENTS: tuple[ToolCall, ...] = ()

# "<tool" followed by whitespace, ">" or "/", or any prefix of that cut off by
# the end of the text (which may still become a tag).
_START_RE = re.compile(r"<(?:\Z|t(?:\Z|o(?:\Z|o(?:\Z|l(?:\Z|[\s>/])))))", re.IGNORECASE)
_ATTR_RE = re.compile(r"""([A-Za-z_:][-\w:.]*)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s"'>/]+))?""")
# Whitespace inside the closing tag is bounded so a partial match stays short.
_CLOSE_RE = re.compile(r"<\s{0,8}/\s{0,8}tool\s{0,8}>", re.IGNORECASE)
_PARTIAL_CLOSE_RE = re.compile(r"<\s{0,8}(?:/\s{0,8}(?:t(?:o(?:o(?:l\s{0,8})?)?)?)?)?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One complete tool call found in the stream.

    ``position`` is the offset, in the text returned by the same
    :meth:`TagScanner.feed` (or :meth:`TagScanner.flush`) call, where the tag
    stood: text before it was written before the call, text after it after.
    ``raw`` is the tag exactly as the model wrote it.  ``closed`` is False when
    the stream ended inside the call (see :meth:`TagScanner.take_open_call`).
    """

    name: str
    query: str
    raw: str
    position: int = 0
    attrs: Mapping[str, str] = field(default_factory=dict)
    closed: bool = True


def _parse_attrs(inner: str) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for m in _ATTR_RE.finditer(inner):
        value = m.group(2) or ""
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        attrs.setdefault(m.group(1).lower(), value.strip())
    return attrs


def _payload_query(payload: str) -> str:
    """The query inside a call; models sometimes wrap it in JSON, so accept that."""
    text = payload.strip()
    if text.startswith("{") and text.endswith("}"):
        try:
            obj = json.loads(text)
        except ValueError:
            return text
        if isinstance(obj, dict):
            for key in ("query", "q", "question"):
                value = obj.get(key)
                if isinstance(value, str):
                    return value.strip()
    return text


class TagScanner:
    """Incremental tag scanner with explicit states (text, open tag, payload).

    ``names`` are the tool names that count as calls (compared
    case-insensitively); ``max_payload`` caps the characters between the open
    tag and ``</tool>``, ``max_open_tag`` caps the open tag itself.  When a cap
    is exceeded the held characters are released verbatim as text, so a runaway
    tag never stalls the visible stream for long.

    Each character is examined a bounded number of times, so the cost is
    amortised O(1) per character; a piece without ``<`` and with nothing held
    is returned as is.
    """

    __slots__ = (
        "_buf",
        "_max_open",
        "_max_payload",
        "_names",
        "_open_attrs",
        "_open_len",
        "_open_name",
        "_search",
        "_state",
    )

    def __init__(
        self,
        names: Iterable[str] = ("retrieve",),
        *,
        max_payload: int = 2000,
        max_open_tag: int = 256,
    ) -> None:
        check_int("max_payload", max_payload, 1)
        check_int("max_open_tag", max_open_tag, len(_OPENER) + 2)
        self._names = frozenset(n.lower() for n in names)
        self._max_payload = max_payload
        self._max_open = max_open_tag
        self.reset()

    def reset(self) -> None:
        """Forget everything held; the next piece starts a fresh stream."""
        self._state = _TEXT
        self._buf = ""  # held characters, always a suffix of the stream so far
        self._search = 0  # where in _buf the next search starts
        self._open_len = 0
        self._open_name = ""
        self._open_attrs: dict[str, str] = {}

    @property
    def holding(self) -> bool:
        """True when some characters are held back waiting for more input."""
        return bool(self._buf)

    @property
    def in_call(self) -> bool:
        """True while inside the payload of a recognised call."""
        return self._state == _BODY

    def feed(self, piece: str) -> tuple[str, Sequence[ToolCall]]:
        """Scan one more piece; return the text now safe to show and the calls found."""
        if self._state == _TEXT and not self._buf and ("<" not in piece or _START_RE.search(piece) is None):
            return piece, _NO_EVENTS
        self._buf += piece
        out: list[str] = []
        events: list[ToolCall] = []
        size = 0  # length of the text released so far in this call
        while True:
            buf = self._buf
            if self._state == _TEXT:
                start = _START_RE.search(buf, self._search)
                if start is None:
                    out.append(buf)
                    size += len(buf)
                    self._buf = ""
                    self._search = 0
                    break
                i = start.start()
                if i:
                    out.append(buf[:i])
                    size += i
                    buf = self._buf = buf[i:]
                if len(buf) < 6:
                    self._search = 0
                    break
                self._state = _OPEN
                self._search = 5
                continue
            if self._state == _OPEN:
                j = buf.find(">", self._search, self._max_open)
                if j == -1:
                    if len(buf) >= self._max_open:
                        # No ">" within the cap: not a tag; release the capped
                        # prefix and rescan the rest as text.
                        cut = self._max_open
                        out.append(buf[:cut])
                        size += cut
                        self._buf = buf[cut:]
                        self._search = 0
                        self._state = _TEXT
                        continue
                    self._search = len(buf)
                    break
                tag = buf[: j + 1]
                attrs = _parse_attrs(tag[5:-1])
                name = attrs.get("name", "").lower()
                if name not in self._names:
                    out.append(tag)
                    size += len(tag)
                    self._buf = buf[j + 1 :]
                    self._search = 0
                    self._state = _TEXT
                    continue
                if tag.endswith("/>"):
                    # A self-closing call carries its query in an attribute.
                    events.append(ToolCall(name, attrs.get("query", ""), tag, size, attrs))
                    self._buf = buf[j + 1 :]
                    self._search = 0
                    self._state = _TEXT
                    continue
                self._state = _BODY
                self._open_len = j + 1
                self._open_name = name
                self._open_attrs = attrs
                self._search = j + 1
                continue
            # _BODY: look for the closing tag from where the last search stopped.
            limit = self._open_len + self._max_payload  # last allowed start of "</tool>"
            m = _CLOSE_RE.search(buf, self._search)
            if m is None:
                lt = buf.rfind("<", self._search)
                if lt != -1 and _PARTIAL_CLOSE_RE.fullmatch(buf, lt) is None:
                    lt = -1
                if len(buf) <= limit or (lt != -1 and lt <= limit):
                    self._search = lt if lt != -1 else len(buf)
                    break
            elif m.start() <= limit:
                attrs = self._open_attrs
                payload = buf[self._open_len : m.start()]
                query = _payload_query(payload) or attrs.get("query", "")
                events.append(ToolCall(self._open_name, query, buf[: m.end()], size, attrs))
                self._buf = buf[m.end() :]
                self._search = 0
                self._state = _TEXT
                continue
            # The payload is over the cap: release the open tag and the first
            # max_payload + 1 payload characters as text, rescan the rest.
            logger.debug("tool payload over %d chars, released as text", self._max_payload)
            cut = limit + 1
            out.append(buf[:cut])
            size += cut
            self._buf = buf[cut:]
            self._search = 0
            self._state = _TEXT
        return "".join(out), events

    def take_open_call(self) -> ToolCall | None:
        """Turn a call cut off by the end of the stream into a call, if there is one.

        Servers such as llama.cpp drop the stop string from their output, so a
        generation stopped on ``</tool>`` ends inside the payload.  The caller
        knows whether that is what happened; when it is, this returns the call
        (``closed=False``) and resets the scanner.  Returns None otherwise.
        """
        if self._state != _BODY:
            return None
        buf = self._buf
        attrs = self._open_attrs
        call = ToolCall(
            self._open_name,
            _payload_query(buf[self._open_len :]) or attrs.get("query", ""),
            buf,
            0,
            attrs,
            closed=False,
        )
        self.reset()
        return call

    def flush(self) -> tuple[str, Sequence[ToolCall]]:
        """End the stream: anything held, including an unclosed tag, is released as text."""
        text = self._buf
        self.reset()
        return text, _NO_EVENTS

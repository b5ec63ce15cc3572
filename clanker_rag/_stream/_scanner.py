"""Incremental scanners that find retrieval calls in a stream of text pieces.

:class:`TagScanner` finds this package's ``<tool name="...">payload</tool>``;
:class:`CallScanner` finds the calls of the other dialects
(:mod:`~clanker_rag._stream._dialects`: literal openers, a literal closer or
a balanced JSON value); :func:`make_scanner` builds the one a controller
needs, chaining the two when it speaks both.

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
from dataclasses import dataclass, field, replace
from typing import Protocol

from .._validate import check_int
from ._dialects import CLANKER, Dialect, parse_call

__all__ = ["CallFinder", "CallScanner", "TagScanner", "ToolCall", "make_scanner"]

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
    ``dialect`` names the format it was written in.
    """

    name: str
    query: str
    raw: str
    position: int = 0
    attrs: Mapping[str, str] = field(default_factory=dict)
    closed: bool = True
    dialect: str = "clanker"


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


class CallFinder(Protocol):
    """What the controller needs of a scanner (:class:`TagScanner`, :class:`CallScanner`, a chain of both)."""

    @property
    def in_call(self) -> bool: ...

    @property
    def holding(self) -> bool: ...

    def reset(self) -> None: ...

    def feed(self, piece: str) -> tuple[str, Sequence[ToolCall]]: ...

    def take_open_call(self) -> ToolCall | None: ...

    def flush(self) -> tuple[str, Sequence[ToolCall]]: ...


# How far past a JSON call's opener its value may start (tekken's "retrieve[CALL_ID]abc123456[ARGS]").
_JSON_LEAD = 96
_SKIPPED_BRACKETS = ("[ARGS]", "[CALL_ID]")


def _json_start(buf: str, start: int) -> int | None:
    """Where the JSON value after ``start`` begins; -1 when it cannot be there; None when more text is needed."""
    i = start
    end = min(len(buf), start + _JSON_LEAD)
    while i < end:
        ch = buf[i]
        if ch == "{":
            return i
        if ch == "[":
            rest = buf[i : i + 9]
            skipped = next((b for b in _SKIPPED_BRACKETS if rest.startswith(b)), None)
            if skipped is not None:
                i += len(skipped)
                continue
            if any(b.startswith(rest) for b in _SKIPPED_BRACKETS) and i + 9 > len(buf):
                return None  # "[ARG" cut off by the end of the text
            return i
        if ch == "\n" and buf[start:i].strip():
            return -1  # a name then a line break: prose, not a call
        i += 1
    return -1 if len(buf) >= start + _JSON_LEAD else None


def _json_end(buf: str, start: int) -> int | None:
    """The index just past the JSON value opening at ``buf[start]``, or None while it is unbalanced."""
    depth = 0
    in_str = False
    escaped = False
    for i in range(start, len(buf)):
        ch = buf[i]
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


class CallScanner:
    """Incremental scanner for dialects whose calls open with a literal string.

    Like :class:`TagScanner` it releases every character that cannot be part
    of a call at once, holds only what may still become one, and returns
    everything that is not a recognised call byte for byte, whatever the
    split.  A call ends at its dialect's closing string, or where its JSON
    value balances; a JSON call counts only when its ``name`` is one of
    ``names`` (any other is released as text).  ``max_payload`` caps the
    characters after the opener.
    """

    __slots__ = (
        "_buf",
        "_dialect",
        "_json_at",
        "_max_payload",
        "_maxlen",
        "_names",
        "_open_len",
        "_open_re",
        "_openers",
        "_prefixes",
        "_search",
        "_starts",
        "_state",
    )

    def __init__(self, dialects: Iterable[Dialect], names: Iterable[str] = ("retrieve",), *, max_payload: int = 2000):
        check_int("max_payload", max_payload, 1)
        self._openers = {opener: d for d in dialects for opener in d.opens}
        if not self._openers:
            raise ValueError("CallScanner needs at least one dialect")
        ordered = sorted(self._openers, key=len, reverse=True)
        self._open_re = re.compile("|".join(re.escape(o) for o in ordered))
        self._starts = frozenset(o[0] for o in ordered)
        self._prefixes = frozenset(o[:k] for o in ordered for k in range(1, len(o)))
        self._maxlen = max(len(o) for o in ordered)
        self._names = frozenset(n.lower() for n in names)
        self._max_payload = max_payload
        self.reset()

    def reset(self) -> None:
        self._state = _TEXT
        self._buf = ""
        self._search = 0
        self._open_len = 0
        self._json_at: int | None = None
        self._dialect = CLANKER

    @property
    def holding(self) -> bool:
        return bool(self._buf)

    @property
    def in_call(self) -> bool:
        return self._state == _BODY

    def feed(self, piece: str) -> tuple[str, Sequence[ToolCall]]:
        if self._state == _TEXT and not self._buf and not any(ch in self._starts for ch in piece):
            return piece, _NO_EVENTS
        self._buf += piece
        out: list[str] = []
        events: list[ToolCall] = []
        size = 0
        while True:
            buf = self._buf
            if self._state == _TEXT:
                m = self._open_re.search(buf, self._search)
                if m is None:
                    keep = 0
                    for k in range(min(self._maxlen - 1, len(buf)), 0, -1):
                        if buf[-k:] in self._prefixes:
                            keep = k
                            break
                    cut = len(buf) - keep
                    out.append(buf[:cut])
                    size += cut
                    self._buf = buf[cut:]
                    self._search = 0
                    break
                i = m.start()
                out.append(buf[:i])
                size += i
                self._buf = buf[i:]
                self._dialect = self._openers[m.group()]
                self._open_len = len(m.group())
                self._json_at = None
                self._state = _BODY
                self._search = self._open_len
                continue
            ended = self._call_end(buf)
            if ended is None:
                if len(buf) - self._open_len <= self._max_payload:
                    break
                # Over the cap: not a call; the opener and the capped payload go out as text.
                logger.debug("%s call over %d chars, released as text", self._dialect.name, self._max_payload)
                cut = self._open_len + self._max_payload + 1
            elif ended[0] < 0:
                cut = self._open_len  # the opener is not followed by a call: it is text
            else:
                payload_end, call_end = ended
                call = self._call(buf[:call_end], payload_end, size)
                if call is not None:
                    events.append(call)
                    self._buf = buf[call_end:]
                    self._search = 0
                    self._state = _TEXT
                    continue
                cut = call_end
            out.append(buf[:cut])
            size += cut
            self._buf = buf[cut:]
            self._search = 0
            self._state = _TEXT
        return "".join(out), events

    def _call_end(self, buf: str) -> tuple[int, int] | None:
        """(payload end, call end) once the call is complete; (-1, -1) when it cannot be one."""
        d = self._dialect
        if d.closes:
            best: tuple[int, int] | None = None
            for closer in d.closes:
                j = buf.find(closer, self._search)
                if j != -1 and (best is None or j < best[0]):
                    best = (j, j + len(closer))
            if best is None:
                self._search = max(self._open_len, len(buf) - max(len(c) for c in d.closes) + 1)
            return best
        if self._json_at is None:
            opener = buf[: self._open_len]
            if opener.startswith("{"):
                self._json_at = 0  # the opener is the JSON value's own start ('{"name"')
            else:
                at = _json_start(buf, self._open_len)
                if at is None:
                    return None
                if at < 0:
                    return (-1, -1)
                self._json_at = at
        end = _json_end(buf, self._json_at)
        return None if end is None else (end, end)

    def _call(self, raw: str, payload_end: int, position: int, *, closed: bool = True) -> ToolCall | None:
        d = self._dialect
        lead = 0 if self._json_at == 0 else self._open_len
        parsed = parse_call(d, raw[lead:payload_end])
        if parsed is None or parsed[0].lower() not in self._names:
            return None
        return ToolCall(parsed[0].lower(), parsed[1], raw, position, {}, closed, d.name)

    def take_open_call(self) -> ToolCall | None:
        """A call the end of the stream cut off (the server stopped on its closer), or None."""
        if self._state != _BODY:
            return None
        buf = self._buf
        if self._dialect.json_end and self._json_at is None:
            if buf.startswith("{"):
                self._json_at = 0
            else:
                at = _json_start(buf, self._open_len)
                if at is None or at < 0:
                    return None  # no JSON value after the opener: not a call
                self._json_at = at
        call = self._call(buf, len(buf), 0, closed=False)
        if call is not None:
            self.reset()
        return call

    def flush(self) -> tuple[str, Sequence[ToolCall]]:
        text = self._buf
        self.reset()
        return text, _NO_EVENTS


class _Chain:
    """:class:`TagScanner` then :class:`CallScanner`: the clanker dialect beside others."""

    __slots__ = ("_first", "_second")

    def __init__(self, first: TagScanner, second: CallScanner) -> None:
        self._first = first
        self._second = second

    @property
    def in_call(self) -> bool:
        return self._first.in_call or self._second.in_call

    @property
    def holding(self) -> bool:
        return self._first.holding or self._second.holding

    def reset(self) -> None:
        self._first.reset()
        self._second.reset()

    def feed(self, piece: str) -> tuple[str, Sequence[ToolCall]]:
        text, calls = self._first.feed(piece)
        return self._through(text, calls)

    def _through(self, text: str, calls: Sequence[ToolCall]) -> tuple[str, Sequence[ToolCall]]:
        second = self._second
        if not calls:
            return second.feed(text)
        out: list[str] = []
        events: list[ToolCall] = []
        size = 0
        pos = 0
        for call in calls:
            part, found = second.feed(text[pos : call.position])
            events.extend(replace(c, position=c.position + size) for c in found)
            # The first scanner's call ends whatever the second held before it.
            held, _ = second.flush()
            out += (part, held)
            size += len(part) + len(held)
            events.append(replace(call, position=size))
            pos = call.position
        part, found = second.feed(text[pos:])
        events.extend(replace(c, position=c.position + size) for c in found)
        out.append(part)
        return "".join(out), events

    def take_open_call(self) -> ToolCall | None:
        if self._first.in_call:
            return self._first.take_open_call()
        if self._second.in_call:
            # What the first scanner holds is the end of the second's call.
            held, _ = self._first.flush()
            # (It holds at most "<tool" and an unfinished "<tool ...", which end no other dialect's call.)
            self._second.feed(held)
            return self._second.take_open_call()
        return None

    def flush(self) -> tuple[str, Sequence[ToolCall]]:
        # Calls either scanner completes only at the end (a call the stream's end closes) count too.
        held, calls = self._first.flush()
        part, found = self._through(held, calls)
        rest, more = self._second.flush()
        return part + rest, [*found, *(replace(c, position=c.position + len(part)) for c in more)]


def make_scanner(
    dialects: Sequence[Dialect], names: Iterable[str], *, max_payload: int
) -> TagScanner | CallScanner | _Chain:
    """The scanner for ``dialects``: :class:`TagScanner` for clanker, :class:`CallScanner` for the rest, chained."""
    names = tuple(names)
    others = [d for d in dialects if d.name != CLANKER.name]
    tag = TagScanner(names, max_payload=max_payload) if len(others) < len(dialects) else None
    calls = CallScanner(others, names, max_payload=max_payload) if others else None
    if tag is not None and calls is not None:
        return _Chain(tag, calls)
    if calls is not None:
        return calls
    return tag if tag is not None else TagScanner(names, max_payload=max_payload)

"""Retrieval-call dialects: how a model family writes a call and reads its answer.

A :class:`Dialect` is a typed description of one format: the literal
strings a call opens with, what closes it (a literal string, or the end of a
balanced JSON value), whether the query is the plain payload or a JSON
``{"name": ..., "arguments": {...}}`` object, how the answer block is framed
and which stop strings a generation needs.  The built-in dialects follow each
family's published chat template or reference code:

``clanker``
    ``<tool name="retrieve">query</tool>`` answered with ``<result>``
    (this package's own; scanned by :class:`~._scanner.TagScanner`).
``search-r1``
    ``<search>query</search>`` answered with ``<information>...</information>``
    (Search-R1's inference loop).
``research``
    ``<search>query</search>`` answered with ``<result>...</result>`` (ReSearch).
``r1-searcher``
    ``<|begin_of_query|>query<|end_of_query|>`` answered with
    ``<|begin_of_documents|>...<|end_of_documents|>`` (R1-Searcher).
``hermes``
    Qwen 2.5 / 3 and Hermes: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
    the result is a ``<tool_response>`` inside a user turn, written with the
    ChatML turn markers so a raw completion reads what the template renders.
``llama3``
    Llama 3.1+: a JSON ``{"name": ..., "parameters": {...}}`` (optionally
    after ``<|python_tag|>``), ended by ``<|eom_id|>`` / ``<|eot_id|>``;
    the result is an ``ipython`` turn.
``mistral``
    ``[TOOL_CALLS]`` followed by ``[{"name": ..., "arguments": ...}]`` (v3) or
    ``name[ARGS]{...}`` (tekken); the result goes in ``[TOOL_RESULTS]...[/TOOL_RESULTS]``.

:func:`dialects_of` turns a name, a :class:`Dialect` or several of them
into the tuple the controller uses; :func:`detect_dialect` names the dialect
a chat template speaks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from .._exceptions import ConfigError

__all__ = [
    "DIALECTS",
    "Dialect",
    "DialectSpec",
    "detect_dialect",
    "dialect_markers",
    "dialects_of",
    "json_result",
    "parse_call",
]

PayloadKind = Literal["plain", "json"]

# JSON keys a call's arguments may carry its query under.
_QUERY_KEYS = ("query", "q", "question", "search_query", "queries", "query_list")
# What stands between a tekken tool name and its JSON arguments.
_MISTRAL_SEPARATORS = ("[ARGS]", "[CALL_ID]")


@dataclass(frozen=True, slots=True)
class Dialect:
    """One retrieval-call format.

    ``opens``
        Literal strings a call starts with (matched case-sensitively: they are
        tags a model was trained on or single special tokens).
    ``closes``
        Literal strings that end a call; empty when the call ends with its
        balanced JSON value (``json_end``) or with the end of the generation.
    ``payload``
        ``"plain"``: the text between opener and closer is the query;
        ``"json"``: it is a JSON call whose ``name`` must be a tool the
        controller knows and whose arguments hold the query.
    ``json_end``
        The call ends where the first JSON value after the opener balances.
    ``close_with``
        What the context gets after a call the server stopped on (servers drop
        the stop string, or never stream an end-of-message token).
    ``result_open`` / ``result_close``
        The frame of the answer block around the numbered passages.
    ``stops``
        Stop strings every generation gets, so it ends at a call.
    ``markers``
        Strings the guard keeps out of retrieved text (besides the openers
        and closers): the result frame's own tags.
    ``turn_frame``
        The answer comes in a turn of its own (a tool or user turn): a call
        made inside ``<think>`` gets ``</think>`` before it.
    ``close_after``
        ``(opener, closer)`` pairs: a call opened with ``opener`` gets that
        closer instead of ``close_with`` (Llama 3.1 ends a
        ``<|python_tag|>`` call with ``<|eom_id|>``, a bare JSON call with
        ``<|eot_id|>``).
    ``json_result``
        A call written as a JSON list (Mistral v3's ``[TOOL_CALLS] [...]``)
        is answered with the block's body inside a JSON object
        ``{"content": ..., "call_id": ...}``, as Mistral's v3 tokenizer
        writes a tool result; the ``id`` of the call, or a 9-character id
        made from the query.
    ``questions``
        The question-boundary trigger's default with this dialect (a
        controller's ``questions=None``).  On for the general tool-calling
        families: their small models call a tool too rarely, and a block for
        the question is what they answer from.  Off for the families trained
        to search (they call on their own; a block before their first step
        pre-empts the loop they learned) and for the package's own tag, which
        a model reads from its prompt (``ask`` and ``serve`` turn it on).
    """

    name: str
    opens: tuple[str, ...]
    closes: tuple[str, ...] = ()
    payload: PayloadKind = "plain"
    json_end: bool = False
    close_with: str = ""
    result_open: str = "\n<result>\n"
    result_close: str = "</result>\n"
    stops: tuple[str, ...] = ()
    markers: tuple[str, ...] = ()
    turn_frame: bool = False
    close_after: tuple[tuple[str, str], ...] = ()
    json_result: bool = False
    questions: bool = False

    def __post_init__(self) -> None:
        if not self.name or not self.opens or any(not o for o in self.opens):
            raise ConfigError(f"dialect {self.name!r}: needs a name and non-empty openers")
        if self.payload not in ("plain", "json"):
            raise ConfigError(f"dialect {self.name!r}: payload must be 'plain' or 'json'")
        if not self.closes and not self.json_end and self.payload == "plain":
            raise ConfigError(f"dialect {self.name!r}: a plain call needs a closing string")

    @property
    def frame(self) -> tuple[str, str]:
        return self.result_open, self.result_close

    def closer_for(self, raw: str) -> str:
        """What the context gets after the call ``raw`` when the stream did not close it."""
        for opener, closer in self.close_after:
            if raw.startswith(opener):
                return closer
        return self.close_with

    def result_frame(self, raw: str) -> tuple[str, str, bool]:
        """The answer frame for the call ``raw``, and whether its body goes in a JSON result object."""
        body = raw
        for opener in self.opens:
            if body.startswith(opener):
                body = body[len(opener) :]
                break
        as_json = self.json_result and body.lstrip().startswith("[")
        return self.result_open + (" " if as_json else ""), self.result_close, as_json


CLANKER = Dialect(
    "clanker",
    opens=("<tool",),
    closes=("</tool>",),
    close_with="</tool>",
    stops=("</tool>",),
)
SEARCH_R1 = Dialect(
    "search-r1",
    opens=("<search>",),
    closes=("</search>",),
    close_with="</search>",
    # Search-R1's loop answers with "\n\n<information>...</information>\n\n".
    result_open="\n\n<information>",
    result_close="</information>\n\n",
    stops=("</search>",),
    markers=("<information>", "</information>", "<answer>", "</answer>"),
)
RESEARCH = Dialect(
    "research",
    opens=("<search>",),
    closes=("</search>",),
    close_with="</search>",
    result_open=" <result>\n",
    result_close="\n</result>",
    stops=("</search>",),
    markers=("<result>", "</result>", "<answer>"),
)
R1_SEARCHER = Dialect(
    "r1-searcher",
    opens=("<|begin_of_query|>",),
    closes=("<|end_of_query|>",),
    close_with="<|end_of_query|>",
    result_open="\n\n<|begin_of_documents|>\n",
    result_close="<|end_of_documents|>\n\n",
    stops=("<|end_of_query|>",),
    markers=("<|begin_of_documents|>", "<|end_of_documents|>"),
)
HERMES = Dialect(
    "hermes",
    opens=("<tool_call>",),
    closes=("</tool_call>",),
    payload="json",
    close_with="</tool_call>",
    # The Qwen 2.5 / 3 template renders a tool message as a user turn holding
    # "<tool_response>\n...\n</tool_response>", then opens the assistant turn.
    result_open="<|im_end|>\n<|im_start|>user\n<tool_response>\n",
    result_close="</tool_response><|im_end|>\n<|im_start|>assistant\n",
    stops=("</tool_call>",),
    markers=("<tool_response>", "</tool_response>", "<|im_start|>", "<|im_end|>"),
    turn_frame=True,
    questions=True,
)
LLAMA3 = Dialect(
    "llama3",
    opens=("<|python_tag|>", '{"name"'),
    payload="json",
    json_end=True,
    # Llama 3.1's template ends a JSON tool call with <|eot_id|>; the tool's
    # answer is an "ipython" turn, then the assistant speaks again.
    close_with="<|eot_id|>",
    # A call after <|python_tag|> (the "Environment: ipython" form) ends with <|eom_id|>.
    close_after=(("<|python_tag|>", "<|eom_id|>"),),
    result_open="<|start_header_id|>ipython<|end_header_id|>\n\n",
    result_close="<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    stops=("<|eom_id|>",),
    markers=("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>"),
    turn_frame=True,
    questions=True,
)
MISTRAL = Dialect(
    "mistral",
    opens=("[TOOL_CALLS]",),
    payload="json",
    json_end=True,
    close_with="</s>",
    # v3 (a JSON list of calls) reads "[TOOL_RESULTS] {"content": ..., "call_id": ...}[/TOOL_RESULTS]";
    # tekken (name[ARGS]{...}) reads the content alone between the tags.
    result_open="[TOOL_RESULTS]",
    result_close="[/TOOL_RESULTS]",
    json_result=True,
    markers=("[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[ARGS]", "[CALL_ID]", "</s>"),
    turn_frame=True,
    questions=True,
)

DIALECTS: dict[str, Dialect] = {d.name: d for d in (CLANKER, SEARCH_R1, RESEARCH, R1_SEARCHER, HERMES, LLAMA3, MISTRAL)}

DialectSpec = str | Dialect | Iterable[str | Dialect]


def dialects_of(spec: DialectSpec) -> tuple[Dialect, ...]:
    """The dialects ``spec`` names: one name or :class:`Dialect`, several of them, or ``"a,b"``.

    Several dialects are allowed together only when no two open a call with
    the same string (``search-r1`` and ``research`` both open with
    ``<search>``: the answer format would be ambiguous).
    """
    items: list[str | Dialect]
    if isinstance(spec, (str, Dialect)):
        items = [p.strip() for p in spec.split(",")] if isinstance(spec, str) else [spec]
    else:
        items = list(spec)
    out: list[Dialect] = []
    for item in items:
        if isinstance(item, Dialect):
            dialect = item
        elif isinstance(item, str) and item.strip().lower() in DIALECTS:
            dialect = DIALECTS[item.strip().lower()]
        else:
            raise ConfigError(f"dialect must be one of {', '.join(DIALECTS)} (or a Dialect), got {item!r}")
        if dialect not in out:
            out.append(dialect)
    if not out:
        raise ConfigError("dialect: name at least one")
    seen: dict[str, str] = {}
    for dialect in out:
        for opener in dialect.opens:
            if opener in seen:
                raise ConfigError(
                    f"dialects {seen[opener]!r} and {dialect.name!r} both open a call with {opener!r}: use one"
                )
            seen[opener] = dialect.name
    return tuple(out)


def dialect_markers(dialects: Iterable[Dialect] = DIALECTS.values()) -> tuple[str, ...]:
    """Every literal string of ``dialects`` (openers, closers, frame tags, markers)."""
    found: dict[str, None] = {}
    for d in dialects:
        for s in (*d.opens, *d.closes, *d.stops, *d.markers, d.close_with):
            if s.strip():
                found[s.strip()] = None
    return tuple(found)


# (what the chat template holds, the dialect it speaks), most specific first.
_TEMPLATE_SIGNS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("<tool_call>",), "hermes"),
    (("<|python_tag|>", "ipython"), "llama3"),
    (("[TOOL_CALLS]",), "mistral"),
    (("<|begin_of_query|>",), "r1-searcher"),
    (("<information>",), "search-r1"),
)


def detect_dialect(chat_template: str | None) -> str | None:
    """The dialect a chat template speaks (``<tool_call>`` → hermes, ...), or None when it does not say."""
    if not chat_template:
        return None
    for signs, name in _TEMPLATE_SIGNS:
        if any(sign in chat_template for sign in signs):
            return name
    return None


def parse_call(dialect: Dialect, payload: str) -> tuple[str, str] | None:
    """``(tool name, query)`` of a call's payload, or None when it is not a well-formed call.

    A plain payload is a ``retrieve`` call with the payload as its query.  A
    JSON payload is one object, or a list whose first item is one, with a
    ``name`` and ``arguments`` / ``parameters``; the tekken form
    ``name[ARGS]{...}`` is read as well.
    """
    text = payload.strip()
    if dialect.payload == "plain":
        return ("retrieve", text)
    name = ""
    for sep in _MISTRAL_SEPARATORS:
        if sep in text and not text.startswith(("{", "[")):
            head, _, rest = text.partition(sep)
            name = head.strip()
            # "[CALL_ID]abc123456[ARGS]{...}": the id is skipped.
            text = rest.partition("[ARGS]")[2] if "[ARGS]" in rest else rest
            text = text.strip()
            break
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if isinstance(obj, list) and obj:
        obj = obj[0]
    if not isinstance(obj, dict):
        return None
    if name:
        args: object = obj
    else:
        raw_name = obj.get("name")
        if not isinstance(raw_name, str):
            function = obj.get("function")
            raw_name = function.get("name") if isinstance(function, dict) else None
            args = function.get("arguments") if isinstance(function, dict) else None
        else:
            args = obj.get("arguments", obj.get("parameters"))
        if not isinstance(raw_name, str):
            return None
        name = raw_name
    if isinstance(args, str):
        encoded = args
        try:
            args = json.loads(encoded)
        except ValueError:
            return (name, encoded.strip())
    return (name, _query_of(args))


def json_result(body: str, raw: str, query: str) -> str:
    """``{"content": body, "call_id": ...}`` for the JSON call ``raw``: its ``id``, or one made from ``query``.

    Mistral's v3 templates require a call id of 9 letters and digits.
    """
    call_id = ""
    # The list of calls starts at the first "[" that opens JSON (an opener like "[TOOL_CALLS]" does not).
    decoder = json.JSONDecoder()
    start = raw.find("[")
    while start >= 0:
        try:
            calls, _ = decoder.raw_decode(raw, start)
        except ValueError:
            start = raw.find("[", start + 1)
            continue
        if isinstance(calls, list) and calls and isinstance(calls[0], dict) and isinstance(calls[0].get("id"), str):
            call_id = calls[0]["id"]
        break
    if not call_id:
        call_id = hashlib.sha1(query.encode()).hexdigest()[:9]
    return json.dumps({"content": body, "call_id": call_id}, ensure_ascii=False)


def _query_of(args: object) -> str:
    if isinstance(args, dict):
        for key in _QUERY_KEYS:
            value = args.get(key)
            if isinstance(value, str):
                return value.strip()
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                return " ".join(v.strip() for v in value)
        strings = [v for v in args.values() if isinstance(v, str)]
        if len(strings) == 1:
            return strings[0].strip()
    return ""

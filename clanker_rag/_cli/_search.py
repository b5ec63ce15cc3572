"""``clanker-rag search``'s output: ranked hits with highlighted snippets, or JSON (one index or sharded)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .._exceptions import ConfigError
from .._types import Hit, KnowledgeBaseLike
from ._terminal import Style, one_line, printable, use_color

__all__ = ["Filtered", "parse_where", "print_search", "print_search_many", "snippet"]


class Filtered:
    """``inner`` searched only within ``source`` (a glob or prefix) and ``where`` (metadata):
    what ``ask --filter/--where`` retrieves from.  Everything else is ``inner``'s."""

    def __init__(self, inner: Any, source: str | None, where: dict[str, Any] | None) -> None:
        self.inner = inner
        self.filters = {key: value for key, value in (("source", source), ("where", where)) if value}

    def search(self, query: str, k: int = 10, **options: Any) -> list[Hit]:
        return list(self.inner.search(query, k, **{**options, **self.filters}))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def parse_where(pairs: Sequence[str]) -> dict[str, Any] | None:
    where: dict[str, list[Any]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:  # the parser's KEY=VALUE check lets none through
            raise ConfigError(f"--where takes KEY=VALUE, got {pair!r}")
        options = where.setdefault(key, [])
        options.append(value)
        # "count=3" matches 3 and "3"; "draft=true" matches true and "true".
        try:
            parsed = json.loads(value)
        except ValueError:
            continue
        if isinstance(parsed, (int, float, bool)) or parsed is None:
            options.append(parsed)
    return {key: values for key, values in where.items()} or None


def snippet(
    analyzer: Callable[[str], Iterable[str]], hit: Hit, query_terms: set[str], style: Style, width: int = 240
) -> str:
    text = hit.text
    spans = []
    for m in re.finditer(r"\w+", text):
        if query_terms.intersection(analyzer(m.group())):
            spans.append((m.start(), m.end()))
    start, end = 0, len(text)
    if len(text) > width:
        # The window of `width` characters holding the most matches.
        best, best_count, j = 0, -1, 0
        for i, (s, _) in enumerate(spans):
            while j < len(spans) and spans[j][1] <= s + width:
                j += 1
            if j - i > best_count:
                best, best_count = s, j - i
        start = max(0, best - width // 4) if spans else 0
        end = min(len(text), start + width)
        start = max(0, min(start, end - width))
    out = ["\u2026" if start > 0 else ""]
    pos = start
    for s, e in spans:
        if e <= start or s >= end:
            continue
        s, e = max(s, start), min(e, end)
        out.append(printable(text[pos:s]))
        out.append(style.mark(printable(text[s:e])))
        pos = e
    out.append(printable(text[pos:end]))
    if end < len(text):
        out.append("\u2026")
    return re.sub(r"\s+", " ", "".join(out)).strip()


def print_search_many(args: argparse.Namespace, kb: KnowledgeBaseLike) -> int:
    """``search --queries FILE``: each line of FILE (``-``: stdin) a query, searched in turn;
    one JSON line each on stdout, ``{"query": ..., "hits": [...]}``, in the file's order."""
    where = parse_where(args.where)
    try:
        stream = sys.stdin if args.queries == "-" else open(args.queries, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise ConfigError(f"--queries {args.queries}: {exc.strerror or exc}") from None
    with stream:
        for line in stream:
            query = line.strip()
            if not query:
                continue
            hits = kb.search(query, args.k, source=args.filter, where=where, feedback=args.feedback)
            record = {"query": query, "hits": [hit.to_dict() for hit in hits]}
            print(json.dumps(record, ensure_ascii=False), flush=False)
    sys.stdout.flush()
    return 0


def print_search(args: argparse.Namespace, kb: KnowledgeBaseLike) -> int:
    """Search ``kb`` (one or sharded) and print the hits as ``search`` does."""
    if args.queries is not None:
        return print_search_many(args, kb)
    hits = kb.search(args.query, args.k, source=args.filter, where=parse_where(args.where), feedback=args.feedback)
    if args.json:
        items = []
        for hit in hits:
            item = hit.to_dict()
            if args.explain:
                item["explanation"] = kb.explain(args.query, hit, feedback=args.feedback).to_dict()
            items.append(item)
        print(json.dumps(items, ensure_ascii=False, indent=None))
        return 0
    if not hits:
        print(f"no results for {args.query!r}", file=sys.stderr)
        return 0
    style = Style(use_color(args.color, sys.stdout))
    analyzer = kb.analyzer
    query_terms = set(analyzer(args.query))
    lines = []
    for rank, hit in enumerate(hits, 1):
        # Indexed names and text may hold terminal escapes: printed escaped.
        where = f"{one_line(hit.source)}:{hit.start_line}-{hit.end_line}"
        head = f"{rank:>2}. {style(where, '1;36')}  {style(f'{hit.score:.3f}', '32')}"
        if hit.section:
            head += f"  {style(one_line(hit.section), '2')}"
        lines.append(head)
        lines.append("    " + snippet(analyzer, hit, query_terms, style))
        if args.explain:
            ex = kb.explain(args.query, hit, feedback=args.feedback)
            for term in sorted(ex.terms, key=lambda t: -t.contribution):
                lines.append(
                    f"      {one_line(term.term):<16} {term.contribution:8.3f}  (tf {term.tf}, df {term.df}, "
                    f"idf {term.idf:.3f}, weight {term.weight:.3f})"
                )
            lines.append(f"      {'= score':<16} {ex.score:8.3f}  (chunk length {ex.dl}, average {ex.avgdl:.1f})")
    print("\n".join(lines))
    return 0

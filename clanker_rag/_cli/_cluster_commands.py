"""``clanker-rag ingest/search/stats/serve --cluster ADDRESS``: the same commands on a sharded index.

``ADDRESS`` is a Dask scheduler (``tcp://host:8786``) or ``local``, which
starts a loopback ``LocalCluster`` for the command and stops it after.  The
index folder comes from ``--index DIR`` (on storage every worker can read).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from .._cluster._drain import drain_worker
from .._cluster._health import index_health
from .._exceptions import ConfigError
from .._validate import check_number
from ..cluster import DEFAULT_TIMEOUT, ShardedKnowledgeBase, close_client, connect, read_manifest, require_dask
from ..cluster import MANIFEST as _MANIFEST
from ._terminal import counted, one_line

__all__ = ["CliHooks", "run_cluster"]

PROG = "clanker-rag"


class CliHooks(NamedTuple):
    """What the command line lends the cluster commands, so both read flags and print alike.

    Passed down rather than imported: ``_cli`` imports this module.
    """

    ingest_options: Callable[[argparse.Namespace], dict[str, Any]]
    print_search: Callable[[argparse.Namespace, Any], int]
    run_proxy: Callable[[argparse.Namespace, Any, Path | None, str], int]


def run_cluster(args: argparse.Namespace, hooks: CliHooks) -> int:
    """Run ``args.command`` on the cluster at ``args.cluster``; the exit code."""
    if args.command == "cluster":
        return _cluster_action(args)
    if args.command not in ("ingest", "search", "stats", "serve"):
        raise ConfigError(f"--cluster works with ingest, search, stats and serve, not {args.command!r}")
    if not getattr(args, "index", None):
        raise ConfigError("--cluster needs --index DIR: the sharded index folder (readable by every worker)")
    path = Path(args.index).absolute()
    require_dask()  # imports distributed, which sets its loggers' levels from the Dask config
    if not getattr(args, "debug", False):
        # Dask reports every worker start and stop at INFO: not news for a command's user.
        logging.getLogger("distributed").setLevel(logging.WARNING)
    timeout = getattr(args, "cluster_timeout", DEFAULT_TIMEOUT)
    check_number("--cluster-timeout", timeout, 0, 1e6, low_open=True, high_open=True)  # seconds
    # A local cluster's workers print to this terminal: their "Compute Failed" tracebacks would
    # stand before the one-line error the command prints for the same failure.
    quiet = logging.DEBUG if getattr(args, "debug", False) else logging.CRITICAL
    client = connect(args.cluster, timeout=timeout, worker_log_level=quiet)
    try:
        if args.command == "ingest":
            return _ingest(args, path, client, hooks, timeout)
        if not (path / _MANIFEST).is_file():
            raise ConfigError(f"{path}: no sharded index (build one with: {PROG} ingest TREE --index {path} --cluster)")
        # Every command (serve too) gathers its query terms' figures from the
        # shards at each search and keeps no per-term state: what this process
        # holds does not grow with the index.
        replicas = getattr(args, "replicas", 1)
        kb = ShardedKnowledgeBase.load(path, client=client, timeout=timeout, term_tables=False, replicas=replicas)
        try:
            if args.command == "search":
                return hooks.print_search(args, kb)
            if args.command == "stats":
                return _stats(args, kb, path)
            # No folder to watch: a sharded index is re-read by restarting serve.
            return hooks.run_proxy(args, kb, None, f"{path} ({counted(kb.n_shards, 'shard')} on {args.cluster})")
        finally:
            kb.close()
    finally:
        close_client(client)


def _ingest(args: argparse.Namespace, path: Path, client: Any, hooks: CliHooks, timeout: float) -> int:
    options = hooks.ingest_options(args)
    # Under the index's writer lock, as one machine's ingest: a second ingest
    # into the same folder waits for this one (then adds to what it saved),
    # or fails with IndexLockedError; it never saves over it.
    with ShardedKnowledgeBase.edit(path, client=client, shards=args.shards, timeout=timeout) as kb:
        report = kb.ingest(args.paths, index_path=path, **options)
    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False))
        return 0
    print(report.summary())
    if args.verbose:
        for skipped, reason in report.skipped:
            print(f"  skipped {skipped}: {reason}", file=sys.stderr)
    print(f"index: {path} ({report.workers} shards)", file=sys.stderr)
    return 0


def _stats(args: argparse.Namespace, kb: ShardedKnowledgeBase, path: Path) -> int:
    shards = kb.shard_stats()
    formats: dict[str, int] = {}
    for info in shards:
        for fmt, n in info.formats.items():
            formats[fmt] = formats.get(fmt, 0) + n
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    settings = kb.settings()
    obj: dict[str, Any] = {
        "path": str(path),
        "shards": len(shards),
        "sources": sum(info.n_sources for info in shards),
        "chunks": sum(info.chunks for info in shards),
        "index_bytes": size,
        "formats": dict(sorted(formats.items(), key=lambda kv: -kv[1])),
        "per_shard": [{"chunks": i.chunks, "sources": i.n_sources, "terms": i.terms} for i in shards],
        **settings,
    }
    if args.json:
        print(json.dumps(obj, ensure_ascii=False))
        return 0
    print(f"index     {obj['path']}")
    print(f"shards    {obj['shards']}")
    print(f"sources   {obj['sources']}")
    print(f"chunks    {obj['chunks']}")
    print(f"size      {size / 1e6:.2f} MB")
    for n, info in enumerate(obj["per_shard"]):
        print(
            f"shard {n:<3} {counted(info['chunks'], 'chunk')}, {counted(info['sources'], 'source')}, "
            f"{counted(info['terms'], 'term')}"
        )
    return 0


def _cluster_action(args: argparse.Namespace) -> int:
    """``clanker-rag cluster health|drain``: asks the scheduler, holds no shard itself."""
    timeout = args.cluster_timeout
    check_number("--cluster-timeout", timeout, 0, 1e6, low_open=True, high_open=True)  # seconds
    if args.cluster == "local":
        raise ConfigError(f"cluster {args.cluster_action} needs a running scheduler's address, not 'local'")
    require_dask()
    if not getattr(args, "debug", False):
        logging.getLogger("distributed").setLevel(logging.WARNING)
    if args.cluster_action == "health":
        if not getattr(args, "index", None):
            raise ConfigError("cluster health needs --index DIR: the sharded index folder")
        path = Path(args.index).absolute()
        manifest = read_manifest(path)
    client = connect(args.cluster, timeout=timeout)
    try:
        if args.cluster_action == "drain":
            drained = drain_worker(client, args.worker, timeout)
            if args.json:
                print(json.dumps(drained.to_dict()))
            else:
                on = ", ".join(drained.now_on) or "no other worker"
                copies = "copy" if drained.moved == 1 else "copies"
                print(
                    f"drained {drained.worker}: {drained.moved} shard {copies} moved "
                    f"(now on {on}); it takes no new work until it restarts"
                )
            return 0
        health = index_health(client, manifest.get("index_id"), manifest["shards"], timeout)
    finally:
        close_client(client)
    if args.json:
        print(json.dumps(health.to_dict()))
        return 0
    print(f"status    {health.status}")
    print(f"workers   {len(health.workers)}")
    for shard in health.shards:
        where = ", ".join(shard.workers) or "no worker"
        line = f"shard {shard.shard:<3} {shard.status:<6} {shard.copies}/{shard.wanted} copies on {where}"
        if shard.generation is not None:
            line += f", save {shard.generation}" + (" (changed since)" if shard.changed else "")
        print(line)
        if shard.last_error:
            print(f"          last error: {one_line(shard.last_error)}")
    return 0

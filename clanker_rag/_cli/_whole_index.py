"""Commands on whole indexes.

The named knowledge bases (``list``, ``create``, ``delete``) and safe copies
(``backup``, ``restore``).
"""

from __future__ import annotations

import argparse
import sys

from ._terminal import one_line, teller


def cmd_list(args: argparse.Namespace) -> int:
    import json
    import time

    from . import _named_kbs

    infos = _named_kbs.list_kbs()
    if args.json:
        print(json.dumps([{"name": i.name, "path": str(i.path), "bytes": i.size, "modified": i.mtime} for i in infos]))
        return 0
    if not infos:
        print(f"no knowledge bases in {_named_kbs.data_home()} (create one: clanker-rag create NAME)", file=sys.stderr)
        return 0
    width = max(len(i.name) for i in infos)
    for i in infos:
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(i.mtime))
        print(f"{i.name:<{width}}  {i.size / 1e6:8.2f} MB  {stamp}  {i.path}")
    return 0


def cmd_copy(args: argparse.Namespace) -> int:
    from . import _named_kbs
    from ._backup import run

    src, dest = args.src, args.dest
    if src is None or dest is None:
        # --kb NAME or --index DIR gave the side left out: a backup's source must exist, a restore may create it.
        if args.index:
            chosen = args.index
        elif src is None:
            chosen = str(_named_kbs.resolve_name(args.kb))
        else:
            chosen = str(_named_kbs.kb_path(args.kb))
        src, dest = (chosen, dest) if src is None else (src, chosen)
    overwrite = getattr(args, "overwrite", False)
    print(one_line(run(src, dest, restore=args.restore, overwrite=overwrite, tell=teller(args))))
    return 0


def cmd_create(args: argparse.Namespace) -> int:
    from . import _named_kbs

    path = _named_kbs.create_kb(args.name)
    print(f"created {args.name!r} at {path}; add documents with: clanker-rag ingest PATH --kb {args.name}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from . import _named_kbs

    path = _named_kbs.delete_kb(args.name)
    print(f"deleted {args.name!r} ({path})")
    return 0

"""``clanker-rag upgrade DIR``: an index folder saved in an older format rewritten in the current one, in place.

Loads and every other command refuse an older folder with one line naming
this command.  A one-machine folder is rewritten by ``_storage._upgrade``
(the only code that decodes the older formats; only this module imports
it) as one commit: the new segment files, then the commit point renamed
over ``index.json``, then the old files removed, so a process killed at any
moment leaves the old index or the new one.  A sharded folder
(``cluster.json``) is upgraded shard by shard, each shard atomically; the
manifest itself is unchanged.  A run stopped between shards leaves some
shards upgraded and the others refused until a second run finishes them.
A folder already current is left as it is.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .._storage._upgrade import upgrade
from ._terminal import counted

__all__ = ["CLUSTER_MANIFEST", "cmd_upgrade"]

# A sharded folder's manifest, kept equal to cluster.MANIFEST (a test checks it) without importing the
# cluster (and Dask's wrappers) for a one-machine folder.
CLUSTER_MANIFEST = "cluster.json"


def cmd_upgrade(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    targets = [folder]
    if (folder / CLUSTER_MANIFEST).is_file():
        from ..cluster import read_manifest

        targets = [folder / name for name in read_manifest(folder)["shard_dirs"]]
    for target in targets:
        done = upgrade(target)
        if done.segments == 0:
            print(f"{target}: already in the current index format ({done.after}); nothing to do")
        else:
            print(
                f"{target}: upgraded from index format {done.before} to {done.after} "
                f"({counted(done.sources, 'source')}, {counted(done.chunks, 'chunk')})"
            )
    return 0

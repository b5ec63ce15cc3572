"""``clanker-rag backup SRC DEST`` and ``clanker-rag restore SRC DEST``: copying an index safely.

An index folder must never be copied over in place (``cp -a backup/. index/``,
``rsync --inplace``): a process serving it maps the data file, and a file
rewritten under it loses its pages (the process dies of SIGBUS) or changes
its answers; a reader can also meet a manifest half written.  Both commands
instead load SRC, hash its whole data file against the manifest (a damaged
index is refused, not copied), and save it into DEST the way every save is
made: a new data file, then the manifest renamed over the old one, under
DEST's writer lock.  Whoever serves DEST keeps reading what it loaded, then
follows the new index.  ``backup`` refuses to replace an index in DEST unless
told to; ``restore`` is for replacing one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .._exceptions import ConfigError
from .._kb import KnowledgeBase, default_index_path
from ._terminal import counted

__all__ = ["Copied", "copy_index"]


class Copied(NamedTuple):
    """What a backup or restore wrote."""

    sources: int
    chunks: int
    replaced: bool  # DEST held an index before


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def copy_index(
    src: Path, dest: Path, *, replace: bool, verb: str, tell: Callable[[str], None] = lambda line: None
) -> Copied:
    """Verify the index in ``src`` and save it into ``dest`` atomically.

    ``replace`` allows replacing an index already in ``dest``; without it
    that is a :class:`ConfigError` naming the option.  ``tell`` is given a
    line before each long step (checking every byte, writing, reading back).
    """
    if not (src / "index.json").is_file():
        raise ConfigError(f"{src}: no index there to {verb}")
    if dest.exists() and not dest.is_dir():
        raise ConfigError(f"{dest}: not a folder")
    if dest.exists() and _same(src, dest):
        raise ConfigError(f"{src} and {dest} are the same folder")
    if dest.exists() and _same(dest, default_index_path()):
        raise ConfigError(f"{dest}: the shipped knowledge base is read-only")
    held = (dest / "index.json").exists()
    if held and not replace:
        raise ConfigError(f"{dest}: already holds an index; pass --overwrite to replace it")
    tell(f"checking every byte of {src} ...")
    kb = KnowledgeBase.load(src)
    kb.verify()  # every byte of the data file, not only what a load checks
    tell(f"writing {counted(len(kb), 'chunk')} to {dest} ...")
    kb.save(dest, overwrite=True)
    # Read back what was written, the way a server will load it.
    tell(f"reading back {dest} ...")
    copy = KnowledgeBase.load(dest)
    copy.verify()
    return Copied(len(copy.sources()), len(copy), held)


def run(src: str, dest: str, *, restore: bool, overwrite: bool, tell: Callable[[str], None] = lambda line: None) -> str:
    """The ``backup``/``restore`` command: the line it prints (``tell``: see :func:`copy_index`)."""
    verb = "restore" if restore else "back up"
    done = copy_index(Path(src), Path(dest), replace=restore or overwrite, verb=verb, tell=tell)
    what = "restored" if restore else "backed up"
    over = ", replacing the index there" if done.replaced else ""
    copied = f"{counted(done.sources, 'source')}, {counted(done.chunks, 'chunk')}"
    return f"{what} {src} to {dest}: {copied}, verified{over}"

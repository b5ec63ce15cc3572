"""Following an index folder that other processes save: the proxy's and the MCP server's reload.

A long-running server holds one loaded :class:`KnowledgeBase`; an
``ingest`` or a commit in another process replaces the folder's commit point
(``index.json``) atomically.  :class:`IndexFollower` notices that by the
file's modification time, size and revision (cheap: one ``stat`` and the
first bytes of the file) and loads the new commit, which costs what the
commits since the last merge hold, not the index size.  A load that fails (a broken
file written by someone else) is logged and retried at the next look, and
the caller keeps serving what it has: a server never goes down, or goes
empty, because of another process's write.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from .._exceptions import ClankerRagError, IndexFormatError
from .._kb import KnowledgeBase
from .._storage import _store
from .._validate import check_number

__all__ = ["IndexFollower", "load_served"]

logger = logging.getLogger(__name__)

Stamp = tuple[int, int, str | None]


def load_served(folder: str | os.PathLike[str]) -> KnowledgeBase:
    """``folder``'s index as a server holds it: its data files read into the process's memory,
    not mapped, so that ``cp`` over them (a restore by hand) cannot kill the server with SIGBUS
    in the middle of a search (see ``KnowledgeBase.load``)."""
    return KnowledgeBase.load(folder, private=True)


def _stamp(file: Path) -> Stamp | None:
    # The revision too: a commit point is small, and two commits within the
    # clock's resolution can leave the same time and size.
    try:
        st = file.stat()
        revision = _store.read_revision(file.parent)
    except (OSError, ClankerRagError):
        return None
    return (st.st_mtime_ns, st.st_size, revision)


class IndexFollower:
    """Loads ``folder`` again each time its index file changes.

    ``check_every`` (seconds) spaces the looks out: a server answering many
    requests a second stats the file at most that often.  Not thread-safe:
    the caller serialises calls (both servers hold a lock around searches).
    """

    def __init__(self, folder: str | os.PathLike[str], *, check_every: float = 0.0) -> None:
        check_number("check_every", check_every, 0)  # seconds
        self._file = Path(folder) / _store.INDEX_FILE
        self._check_every = check_every
        self._checked = time.monotonic()
        self._stamp = _stamp(self._file)

    @property
    def folder(self) -> Path:
        return self._file.parent

    def fresh(self, current: object = None) -> KnowledgeBase | None:
        """The index newly loaded if its file changed since the last successful load, else None.

        ``current`` is what the caller serves: when its data file was changed
        in place (see :meth:`KnowledgeBase.data_rewritten`), the folder is
        loaded again at once, and if that fails the call raises
        :class:`IndexFormatError` rather than let the caller read pages that
        may be gone (which would kill the process with SIGBUS).
        """
        if isinstance(current, KnowledgeBase) and current.data_rewritten():
            return self._reload_rewritten()
        if self._check_every:
            now = time.monotonic()
            if now - self._checked < self._check_every:
                return None
            self._checked = now
        stamp = _stamp(self._file)
        if stamp is None or stamp == self._stamp:
            return None
        try:
            kb = load_served(self._file.parent)
        except (ClankerRagError, OSError, ValueError) as exc:
            # Keep the old stamp, so the next look tries again.
            logger.warning("could not reload %s: %s", self._file.parent, exc)
            return None
        self._stamp = stamp
        logger.info("reloaded %s (%d chunks)", self._file.parent, len(kb))
        return kb

    def _reload_rewritten(self) -> KnowledgeBase:
        folder = self._file.parent
        stamp = _stamp(self._file)
        try:
            kb = load_served(folder)
        except (ClankerRagError, OSError, ValueError) as exc:
            logger.error("the data file of %s was changed in place and the folder does not load: %s", folder, exc)
            raise IndexFormatError(
                f"{folder}: its data file was rewritten in place while served (cp or rsync --inplace over it?); "
                f"not reading it until the folder loads again ({exc}); see 'clanker-rag restore'"
            ) from None
        self._stamp = stamp
        logger.warning("the data file of %s was changed in place: loaded the folder again (%d chunks)", folder, len(kb))
        return kb

"""Every error clanker_rag raises on purpose.

One base class, so ``except ClankerRagError`` catches anything the library
means to tell you about; the subclasses say which part failed::

    ClankerRagError
     +-- ConfigError              a bad parameter (value and valid range in the message)
     +-- IndexFormatError         an index file is missing, truncated, tampered with,
     |                            or written by a newer clanker_rag
     +-- IndexLockedError         another process holds the index's writer lock
     +-- IndexWriteError          an index cannot be written (a read-only folder, a
     |                            full disk); the index already there is unchanged
     +-- IngestError              a path cannot be ingested at all (a skipped file is
     |                            reported, not raised)
     +-- MissingExtraError        an optional dependency is not installed; the message
     |                            names the extra to install
     +-- BackendError             a model backend failed: server down, timeout, garbage
     +-- RetrievalTimeoutError    retrieval took longer than the controller allows

``MissingExtraError`` is also an ``ImportError``, ``IndexWriteError`` an
``OSError`` (with its ``errno`` and ``filename``) and ``RetrievalTimeoutError``
also a ``TimeoutError``, so code written against the standard exceptions keeps
working.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "BackendError",
    "ClankerRagError",
    "ConfigError",
    "IndexFormatError",
    "IndexLockedError",
    "IndexWriteError",
    "IngestError",
    "MissingExtraError",
    "RetrievalTimeoutError",
]


class ClankerRagError(Exception):
    """Base class of every error raised on purpose by clanker_rag."""


class ConfigError(ClankerRagError, ValueError):
    """A parameter is out of range; the message names the value and the range."""


class IndexFormatError(ClankerRagError):
    """An index cannot be loaded: missing, truncated, tampered or too new."""


class IndexLockedError(ClankerRagError):
    """Another process is writing the same index."""


class IndexWriteError(ClankerRagError, OSError):
    """An index cannot be written (read-only folder, full disk); the one there is unchanged."""


class IngestError(ClankerRagError):
    """A path cannot be ingested at all."""


class MissingExtraError(ClankerRagError, ImportError):
    """An optional dependency is missing; the message says what to install."""


class BackendError(ClankerRagError):
    """A generation backend failed (unreachable, timed out, bad answer)."""


class RetrievalTimeoutError(ClankerRagError, TimeoutError):
    """Retrieval did not finish within the controller's timeout."""


def install_hint(extra: str) -> str:
    """The pip command that installs ``extra`` for this copy of the package, ready to paste.

    clanker-rag is installed from a clone (``pip install -e .``), where
    ``pip install 'clanker-rag[X]'`` finds no such package on a registry: from
    a checkout the hint names the checkout's own folder, which works from any
    working directory.
    """
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and (root / "clanker_rag").is_dir():
        return f"pip install -e '{root}[{extra}]'"
    return f"pip install 'clanker-rag[{extra}]'"

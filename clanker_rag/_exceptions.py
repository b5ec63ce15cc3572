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
     |    +-- ServerUnreachableError   no connection to the model server (refused,
     |    |                            unknown host, reset before an answer)
     |    +-- ServerTimeoutError       connecting or waiting for the next bytes took
     |    |                            longer than the timeout allows
     |    +-- ServerStatusError        the server answered an HTTP error status
     |    +-- ServerAnswerError        the answer is broken: not the expected JSON, or
     |                                 the connection dropped mid-answer
     +-- RetrievalTimeoutError    retrieval took longer than the controller allows

``MissingExtraError`` is also an ``ImportError``, ``IndexWriteError`` an
``OSError`` (with its ``errno`` and ``filename``), ``ServerUnreachableError`` a
``ConnectionError`` and ``RetrievalTimeoutError`` and ``ServerTimeoutError``
also ``TimeoutError``, so code written against the standard exceptions keeps
working.  The four ``Server*Error`` classes are raised by the one HTTP client
(``_http/``) and carry the ``url`` they were talking to.
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
    "ServerAnswerError",
    "ServerStatusError",
    "ServerTimeoutError",
    "ServerUnreachableError",
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


class ServerUnreachableError(BackendError, ConnectionError):
    """No connection to a model server: refused, unknown host, or reset before any answer."""

    def __init__(self, message: str, url: str) -> None:
        super().__init__(message)
        self.url = url


class ServerTimeoutError(BackendError, TimeoutError):
    """A model server took longer than the timeout to accept the connection or send more bytes."""

    def __init__(self, message: str, url: str) -> None:
        super().__init__(message)
        self.url = url


class ServerStatusError(BackendError):
    """A model server answered an HTTP error status; ``body`` holds the start of its answer."""

    def __init__(self, message: str, url: str, status: int, body: bytes) -> None:
        super().__init__(message)
        self.url = url
        self.status = status
        self.body = body


class ServerAnswerError(BackendError):
    """A model server's answer is broken: not the expected JSON, an error event, or cut off mid-answer."""

    def __init__(self, message: str, url: str) -> None:
        super().__init__(message)
        self.url = url


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

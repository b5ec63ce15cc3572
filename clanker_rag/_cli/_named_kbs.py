"""Named knowledge bases kept under one data directory.

``clanker-rag create docs`` makes ``<home>/docs/``, an ordinary index folder;
``--kb docs`` on any command resolves to it.  The home is
``$CLANKER_RAG_HOME`` when set, else the platform's per-user data folder:
``$XDG_DATA_HOME/clanker-rag`` (``~/.local/share/clanker-rag``) on Linux,
``~/Library/Application Support/clanker-rag`` on macOS and
``%LOCALAPPDATA%\\clanker-rag`` on Windows.

Nothing here imports the index code: listing names must stay instant.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from .._exceptions import ConfigError

__all__ = ["HOME_ENV", "KbInfo", "create_kb", "data_home", "delete_kb", "kb_path", "list_kbs", "resolve_name"]

HOME_ENV = "CLANKER_RAG_HOME"
INDEX_FILE = "index.json"  # kept equal to _store.INDEX_FILE without importing it
# Files an index folder may hold besides index.json and .lock: the index's
# data file (_store) and stored embeddings (_dense), and their temporary files.
_INDEX_FILES = re.compile(
    r"\.?(data-[0-9a-f]{32}\.bin|dense-[A-Za-z0-9_.-]*-[0-9a-f]{10}(\.json|\.[0-9a-f]{12}\.f32))(\.\d+\.[0-9a-f]+\.tmp)?"
)


def index_size(path: Path) -> int:
    """Bytes on disk of the index in ``path``: the manifest and its data file."""
    total = 0
    for entry in [path / INDEX_FILE, *path.glob("data-*.bin")]:
        with contextlib.suppress(OSError):
            total += entry.stat().st_size
    return total


# Names become folder names: keep them portable and free of path tricks.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def data_home() -> Path:
    """The folder holding every named knowledge base (may not exist yet)."""
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "clanker-rag"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "clanker-rag"
    xdg = os.environ.get("XDG_DATA_HOME")
    base_dir = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "share"
    return base_dir / "clanker-rag"


def check_name(name: str) -> str:
    """Return ``name`` if it is a valid knowledge-base name, else raise ``ConfigError``."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or name in (".", ".."):
        raise ConfigError(
            f"invalid knowledge-base name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def kb_path(name: str) -> Path:
    """The folder of the named knowledge base (whether or not it exists)."""
    return data_home() / check_name(name)


def exists(name: str) -> bool:
    return (kb_path(name) / INDEX_FILE).is_file()


def resolve_name(name: str) -> Path:
    """The folder of an existing named knowledge base; ``ConfigError`` naming the fix otherwise."""
    path = kb_path(name)
    if not (path / INDEX_FILE).is_file():
        known = [info.name for info in list_kbs()]
        hint = f" (known: {', '.join(known)})" if known else ""
        raise ConfigError(
            f"no knowledge base named {name!r} in {data_home()}{hint}; create it with: clanker-rag create {name}"
        )
    return path


@dataclass(frozen=True)
class KbInfo:
    """One named knowledge base as ``clanker-rag list`` shows it."""

    name: str
    path: Path
    size: int
    mtime: float


def list_kbs() -> list[KbInfo]:
    """Every named knowledge base under the home, sorted by name."""
    home = data_home()
    try:
        entries = sorted(home.iterdir())
    except FileNotFoundError:
        return []
    out = []
    for entry in entries:
        index = entry / INDEX_FILE
        if not _NAME_RE.fullmatch(entry.name):
            continue
        try:
            st = index.stat()
        except OSError:
            continue
        out.append(KbInfo(entry.name, entry, index_size(entry), st.st_mtime))
    return out


def create_kb(name: str, *, exist_ok: bool = False) -> Path:
    """Create an empty named knowledge base; ``ConfigError`` if it already exists."""
    path = kb_path(name)
    if (path / INDEX_FILE).is_file():
        if exist_ok:
            return path
        raise ConfigError(f"a knowledge base named {name!r} already exists at {path}")
    from .._kb import KnowledgeBase

    KnowledgeBase().save(path)
    return path


def delete_kb(name: str) -> Path:
    """Delete a named knowledge base folder; ``ConfigError`` if there is none."""
    path = resolve_name(name)
    # Refuse to remove a folder that holds anything an index does not write:
    # a mistaken CLANKER_RAG_HOME must not cost the user unrelated files.
    allowed = {INDEX_FILE, ".lock"}
    foreign = [
        p.name
        for p in path.iterdir()
        if p.name not in allowed and not p.name.startswith(f".{INDEX_FILE}.") and not _INDEX_FILES.fullmatch(p.name)
    ]
    if foreign:
        listed = ", ".join(sorted(foreign)[:3])
        raise ConfigError(f"{path} holds files that are not part of an index ({listed}); not deleting it")
    shutil.rmtree(path)
    return path

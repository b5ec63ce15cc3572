"""Finding the files of a tree that are safe and useful to index.

The walk is iterative (very deep trees cannot exhaust the stack), sorted (the
same tree always gives the same order), honours ``.gitignore`` files with
git's own matching rules, prunes tool and dependency folders, never follows a
symlink out of the root unless asked, and survives symlink loops.

What the walk decides is what gets read: folders are listed through
descriptors opened without following symlinks and checked against the
inode their parent's listing showed, and each selected file carries its
resolved path and inode (a :class:`._readers.FoundPath`), which the reader
checks on open.  Ignore files and data files are opened without blocking and
only when regular: a FIFO is skipped, never waited on.

The secret guard runs before anything is opened: files whose names say they
hold credentials are never read.  Content-based checks (private-key blocks)
happen after decoding, in the ingest step.

Every file that is not selected is reported with its reason; pruned folders
are reported once, as ``folder/``.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import logging
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from .._types import glob_matches, source_matches
from ._readers import BENEATH, DEFAULT_EXTENSIONS, DEFAULT_FILENAMES, FoundPath, format_for, open_beneath

__all__ = [
    "DEFAULT_SKIP_DIRS",
    "SECRET_NAME_PATTERNS",
    "Candidate",
    "DiscoveryOptions",
    "GitIgnore",
    "Skipped",
    "compile_glob",
    "discover",
    "is_virtualenv",
    "resolved",
    "secret_name_reason",
    "skipped_by_name",
]

logger = logging.getLogger(__name__)

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
# Folders listed through descriptors (POSIX); elsewhere by path.
_FD_WALK = BENEATH and os.scandir in os.supports_fd

DEFAULT_SKIP_DIRS: frozenset[str] = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".bzr",
        "_darcs",
        "CVS",
        "node_modules",
        "bower_components",
        "__pycache__",
        ".venv",  # (not a package name: nothing else is called so; a venv elsewhere is found by its pyvenv.cfg)
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        ".eggs",
        "dist",
        "build",
        "site-packages",
        ".gradle",
        ".next",
        ".nuxt",
        ".cache",
    }
)

# Matched case-insensitively against the file name.
SECRET_NAME_PATTERNS: tuple[str, ...] = (
    ".env",
    ".env.*",
    ".envrc",
    "*.env",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.keystore",
    "*.jks",
    "*.ppk",
    "*.gpg",
    "*.asc",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".netrc",
    "_netrc",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".htpasswd",
    ".git-credentials",
    ".dockercfg",
    ".boto",
    ".s3cfg",
    "credentials*",
    "*.tfstate",
    "*.tfstate.backup",
    "client_secret*.json",
    "application_default_credentials.json",
    "service-account*.json",
    "*-service-account.json",
    "accesstokens.json",
    "azureprofile.json",
    "secrets.yaml",
    "secrets.yml",
    "secrets.json",
    "secrets.toml",
)
# Matched against the end of the relative path (posix separators).
_SECRET_PATH_PATTERNS: tuple[str, ...] = (
    ".aws/*",
    ".ssh/*",
    ".docker/config.json",
    ".kube/config",
    ".config/gcloud/*",
    ".azure/*",
    ".gnupg/*",
)
_SECRET_RE = re.compile("|".join(fnmatch.translate(p) for p in SECRET_NAME_PATTERNS), re.IGNORECASE)
_SECRET_PATH_RE = re.compile(
    "|".join(r"(?:^|.*/)" + fnmatch.translate(p) for p in _SECRET_PATH_PATTERNS), re.IGNORECASE
)


def secret_name_reason(rel: str) -> str | None:
    """Why the secret guard refuses this path by name, or None."""
    name = rel.rsplit("/", 1)[-1]
    if _SECRET_RE.match(name):
        pattern = next(p for p in SECRET_NAME_PATTERNS if fnmatch.fnmatch(name.lower(), p.lower()))
        return f"secret guard: file name matches {pattern!r}"
    if _SECRET_PATH_RE.match(rel):
        return "secret guard: credential folder"
    return None


# ------------------------------------------------------------- git globs


def _segment_regex(seg: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(seg):
        c = seg[i]
        if c == "\\" and i + 1 < len(seg):
            out.append(re.escape(seg[i + 1]))
            i += 2
            continue
        if c == "*":
            while i + 1 < len(seg) and seg[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            if j < len(seg) and seg[j] in "!^":
                j += 1
            if j < len(seg) and seg[j] == "]":
                j += 1
            while j < len(seg) and seg[j] != "]":
                j += 1
            if j >= len(seg):
                out.append(re.escape(c))
            else:
                body = seg[i + 1 : j]
                negate = body[:1] in ("!", "^")
                if negate:
                    body = body[1:]
                body = body.replace("\\", "\\\\").replace("^", "\\^")
                out.append(f"[^/{body}]" if negate else f"(?!/)[{body}]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def compile_glob(pattern: str) -> tuple[re.Pattern[str], bool]:
    """Compile a gitignore-style pattern into ``(regex, directory_only)``.

    A pattern without an inner ``/`` matches at any depth (``*.md``); one
    with a ``/`` is anchored to the base (``docs/*.md``, ``/build``); ``**``
    spans folders.  The regex matches a path relative to the base.
    """
    dir_only = pattern.endswith("/")
    pattern = pattern.rstrip("/")
    anchored = "/" in pattern
    pattern = pattern.lstrip("/")
    parts = pattern.split("/")
    pieces: list[str] = []
    for i, seg in enumerate(parts):
        last = i == len(parts) - 1
        if seg == "**":
            pieces.append(".*" if last else "(?:[^/]*/)*")
        else:
            pieces.append(_segment_regex(seg) + ("" if last else "/"))
    body = "".join(pieces)
    regex = ("" if anchored else "(?:.*/)?") + body
    return re.compile(regex + r"\Z", re.DOTALL), dir_only


@dataclass(slots=True)
class _Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    text: str


@dataclass(slots=True)
class GitIgnore:
    """The rules of one ignore file, with where its base sits relative to the ingest root.

    A path ``rel`` (relative to the root) is seen by these rules as
    ``add + rel[len(strip):]``: ``strip`` is the base folder below the root,
    ``add`` the root's position below an ignore file above it.
    """

    rules: list[_Rule]
    strip: str = ""
    add: str = ""

    @classmethod
    def parse(cls, text: str, *, strip: str = "", add: str = "") -> GitIgnore:
        rules: list[_Rule] = []
        for raw in text.splitlines():
            line = raw.rstrip("\r")
            if not line or line.startswith("#"):
                continue
            # Trailing spaces are ignored unless escaped with a backslash.
            stripped = line.rstrip(" ")
            if stripped.endswith("\\") and len(stripped) < len(line):
                stripped += " "
            line = stripped
            negate = line.startswith("!")
            if negate or line.startswith(("\\!", "\\#")):
                line = line[1:]
            if not line or line == "/":
                continue
            regex, dir_only = compile_glob(line)
            rules.append(_Rule(regex, negate, dir_only, raw))
        return cls(rules, strip, add)

    def decide(self, rel: str, is_dir: bool) -> bool | None:
        """True: ignored, False: re-included by ``!``, None: no rule matches."""
        if self.strip:
            if not rel.startswith(self.strip):
                return None
            rel = rel[len(self.strip) :]
        rel = self.add + rel
        for rule in reversed(self.rules):
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.match(rel):
                return not rule.negate
        return None


def _ignored(rel: str, is_dir: bool, ignores: tuple[GitIgnore, ...]) -> bool:
    # Deeper ignore files take precedence; within a file the last match wins.
    for gi in reversed(ignores):
        verdict = gi.decide(rel, is_dir)
        if verdict is not None:
            return verdict
    return False


# ------------------------------------------------------------------ walk


@dataclass(frozen=True, slots=True)
class Candidate:
    """A file selected for reading."""

    path: str
    rel: str
    fmt: str


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file or pruned folder that is not indexed, and why."""

    rel: str
    reason: str
    transient: bool = False


@dataclass(slots=True)
class DiscoveryOptions:
    """What the walk selects; see :func:`clanker_rag._ingest._run.ingest` for the meaning."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    extensions: frozenset[str] = DEFAULT_EXTENSIONS
    filenames: frozenset[str] = DEFAULT_FILENAMES
    skip_dirs: frozenset[str] = DEFAULT_SKIP_DIRS
    gitignore: bool = True
    secret_guard: bool = True
    follow_symlinks: bool = False
    skip_real: frozenset[str] = frozenset()
    # What the ingest puts before each file's path in its source name (several
    # roots, ``prefix=``): ``include`` globs match the source name.
    source_prefix: str = ""
    _exclude_re: list[tuple[str, re.Pattern[str], bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._exclude_re = [(p, *compile_glob(p)) for p in self.exclude]

    @staticmethod
    def normalise_extensions(exts: Iterable[str]) -> frozenset[str]:
        return frozenset(e.lower() if e.startswith(".") else "." + e.lower() for e in exts)


def _matching(rel: str, is_dir: bool, patterns: list[tuple[str, re.Pattern[str], bool]]) -> str | None:
    for text, regex, dir_only in patterns:
        if dir_only and not is_dir:
            continue
        if regex.match(rel):
            return text
    return None


def _included(rel: str, options: DiscoveryOptions) -> bool:
    """Whether an ``include`` glob selects the file: the glob of ``search --filter`` and
    ``sources GLOB`` (:func:`glob_matches`), on the file's source name or its path in
    the root; a pattern without ``/`` also names a file at any depth (``Makefile``)."""
    names = (options.source_prefix + rel, rel) if options.source_prefix else (rel,)
    base = rel.rsplit("/", 1)[-1]
    for pattern in options.include:
        if any(source_matches(name, pattern) if "/" in pattern else glob_matches(name, pattern) for name in names):
            return True
        if "/" not in pattern and glob_matches(base, pattern):
            return True
    return False


def _printable(name: str) -> str:
    """A file name that can be shown and stored even if it was not valid UTF-8."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _has_surrogates(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolved(path: str) -> str | None:
    """``os.path.realpath``, or None when a symlink changes under it (it raises ``OSError`` then)."""
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return None


def _repo_ignores(root: str) -> tuple[GitIgnore, ...]:
    """Ignore files of an enclosing git work tree, above the ingest root."""
    ancestors: list[str] = []
    cur = root
    while True:
        parent = os.path.dirname(cur)
        if parent == cur:
            return ()
        ancestors.append(parent)
        if os.path.exists(os.path.join(parent, ".git")):
            break
        cur = parent
    out: list[GitIgnore] = []
    for base in reversed(ancestors):
        rel_root = os.path.relpath(root, base).replace(os.sep, "/") + "/"
        files = [os.path.join(base, ".gitignore")]
        if base == ancestors[-1]:
            files.insert(0, os.path.join(base, ".git", "info", "exclude"))
        for path in files:
            text = _read_small(path)
            if text is not None:
                out.append(GitIgnore.parse(text, add=rel_root))
    return tuple(out)


def _read_small(real: str, dir_fd: int | None = None) -> str | None:
    """The first MiB of the ignore file at resolved path ``real`` (a name in ``dir_fd`` when given).

    Opened without blocking and without following a symlink: an ignore file
    that is a FIFO, a device or a symlink is skipped (logged), never waited on.
    """
    flags = os.O_RDONLY | _O_NONBLOCK | _O_NOCTTY
    try:
        if dir_fd is not None:
            fd = os.open(real, flags | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
        else:
            fd = open_beneath(real, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.info("ignore file %s not read: %s", real, exc.strerror or exc)
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            logger.warning("ignore file %s not read: not a regular file", real)
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            if _O_NONBLOCK:
                os.set_blocking(fh.fileno(), True)
            data = fh.read(1 << 20)
    except OSError as exc:
        logger.info("ignore file %s not read: %s", real, exc.strerror or exc)
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace")


def _ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


class _Changed(Exception):
    """A folder is no longer the one the walk saw (swapped, replaced by a symlink)."""


def _open_folder(real: str, ident: tuple[int, int] | None) -> int | None:
    """A descriptor of folder ``real`` opened following no symlink, checked against ``ident``.

    None where descriptors cannot be listed (the walk lists paths then).
    Raises ``OSError`` when it cannot be opened, :class:`_Changed` when it is
    not the folder the walk saw.
    """
    if not _FD_WALK:  # pragma: no cover - Windows
        return None
    try:
        fd = open_beneath(real, os.O_RDONLY | _O_DIRECTORY)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _Changed from None
        raise
    if ident is not None and _ident(os.fstat(fd)) != ident:
        os.close(fd)
        raise _Changed
    return fd


@dataclass(frozen=True, slots=True)
class _Folder:
    """A folder waiting to be listed: how it is named and where it really is."""

    path: str  # as the walk reached it (what file paths are built from)
    real: str  # resolved, opened without following symlinks
    rel: str
    active: tuple[GitIgnore, ...]
    ident: tuple[int, int] | None  # (device, inode) when found; None for a root not yet opened


def discover(root: str, options: DiscoveryOptions) -> Iterator[Candidate | Skipped]:
    """Walk ``root`` (a folder) and yield selected files and skips in sorted order.

    Every folder is listed through a descriptor opened without following a
    symlink and checked against what its parent's listing saw, and every
    selected file carries the resolved path and inode the walk saw (a
    :class:`FoundPath`): what is read is what was walked, even if a file or
    folder is swapped for a symlink meanwhile.
    """
    root_real = resolved(root)
    if root_real is None:
        yield Skipped("./", "unreadable folder: it changed while being resolved", transient=True)
        return
    root_ident = root.ident if isinstance(root, FoundPath) and root.real == root_real else None
    if isinstance(root, FoundPath) and root.real != root_real:
        yield Skipped("./", "folder changed since it was checked (now a symlink elsewhere)", transient=True)
        return
    ignores: tuple[GitIgnore, ...] = ()
    if options.gitignore:
        ignores = _repo_ignores(root_real)
    visited: set[tuple[int, int]] = set()
    stack: list[_Folder] = [_Folder(root, root_real, "", ignores, root_ident)]
    while stack:
        folder = stack.pop()
        prefix = folder.rel + "/" if folder.rel else ""
        try:
            fd = _open_folder(folder.real, folder.ident)
        except _Changed:
            yield Skipped(prefix or "./", "folder changed during the walk (swapped or now a symlink)", transient=True)
            continue
        except OSError as exc:
            yield Skipped(prefix or "./", f"unreadable folder: {exc.strerror or exc}", transient=True)
            continue
        try:
            if fd is not None and not folder.rel:
                visited.add(_ident(os.fstat(fd)))
            elif not folder.rel:
                with contextlib.suppress(OSError):
                    visited.add(_ident(os.stat(root_real)))
            yield from _list(folder, fd, root_real, visited, stack, options)
        finally:
            if fd is not None:
                os.close(fd)


def _list(
    folder: _Folder,
    fd: int | None,
    root_real: str,
    visited: set[tuple[int, int]],
    stack: list[_Folder],
    options: DiscoveryOptions,
) -> Iterator[Candidate | Skipped]:
    """One folder's entries (``fd`` its descriptor): its files decided, its subfolders pushed on ``stack``."""
    prefix = folder.rel + "/" if folder.rel else ""
    active = folder.active
    try:
        with os.scandir(fd if fd is not None else folder.path) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        yield Skipped(prefix or "./", f"unreadable folder: {exc.strerror or exc}", transient=True)
        return
    if options.gitignore and not folder.rel:
        own = _read_small(os.path.join(root_real, ".git", "info", "exclude"))
        if own is not None:
            active = (*active, GitIgnore.parse(own))
    if options.gitignore and any(e.name == ".gitignore" for e in entries):
        real = os.path.join(folder.real, ".gitignore")
        text = _read_small(".gitignore", fd) if fd is not None else _read_small(real)
        if text is not None:
            active = (*active, GitIgnore.parse(text, strip=prefix))
    subdirs: list[_Folder] = []
    for entry in entries:
        name = entry.name
        rel = prefix + name
        path = os.path.join(folder.path, name)
        real = os.path.join(folder.real, name)
        if _has_surrogates(name):
            yield Skipped(_printable(rel), "file name is not valid UTF-8")
            continue
        try:
            is_link = entry.is_symlink()
            is_dir = entry.is_dir()
            is_file = not is_dir and entry.is_file()
            seen = _ident(entry.stat(follow_symlinks=False))
        except OSError as exc:
            yield Skipped(rel, f"unreadable: {exc.strerror or exc}", transient=True)
            continue
        if is_link:
            target = resolved(real)
            if target is None:
                yield Skipped(rel, "symlink changed during the walk", transient=True)
                continue
            if not os.path.exists(target):
                yield Skipped(rel, "broken symlink")
                continue
            if not options.follow_symlinks and not _within(target, root_real):
                yield Skipped(rel + ("/" if is_dir else ""), "symlink leaves the ingest root")
                continue
            try:
                seen = _ident(os.stat(target))
            except OSError as exc:
                yield Skipped(rel, f"unreadable: {exc.strerror or exc}", transient=True)
                continue
            real = target
        if is_dir:
            skip = _dir_skip_reason(name, real, rel, active, options)
            if skip is not None:
                yield Skipped(rel + "/", skip)
                continue
            if seen in visited:
                yield Skipped(rel + "/", "symlink loop (folder already visited)")
                continue
            visited.add(seen)
            subdirs.append(_Folder(path, real, rel, active, seen))
            continue
        if not is_file:
            yield Skipped(rel, "not a regular file")
            continue
        yield _file_decision(FoundPath(path, real, seen), rel, active, options)
    stack.extend(reversed(subdirs))


def _dir_skip_reason(
    name: str, real: str, rel: str, active: tuple[GitIgnore, ...], options: DiscoveryOptions
) -> str | None:
    if skipped_by_name(name, real, options):
        return f"skipped folder ({name})"
    if options.secret_guard and _SECRET_PATH_RE.match(rel + "/x"):
        return "secret guard: credential folder"
    if (pattern := _matching(rel, True, options._exclude_re)) is not None:
        return f"excluded by {pattern!r}"
    if active and _ignored(rel, True, active):
        return "ignored by .gitignore"
    if options.skip_real and real in options.skip_real:
        return "skipped folder (the index itself)"
    if is_virtualenv(real):
        return "skipped folder (virtualenv)"
    return None


# Output folder names that are also real package names (pypa's ``build``):
# such a folder holding ``__init__.py`` is a source package and is walked.
_PACKAGE_LIKE_NAMES = frozenset({"build", "dist"})


def skipped_by_name(name: str, real: str, options: DiscoveryOptions) -> bool:
    """Whether the folder ``name`` (at ``real``) is one the walk never enters for its name alone."""
    if name.endswith(".egg-info"):
        return True
    if name not in options.skip_dirs:
        return False
    return not (name in _PACKAGE_LIKE_NAMES and os.path.isfile(os.path.join(real, "__init__.py")))


def is_virtualenv(real: str) -> bool:
    """Whether the folder is a Python environment: it holds ``pyvenv.cfg`` (venv, virtualenv, uv) or
    ``conda-meta`` (conda).  Its name says nothing: the stdlib's own ``venv`` package is source."""
    return os.path.isfile(os.path.join(real, "pyvenv.cfg")) or os.path.isdir(os.path.join(real, "conda-meta"))


def _file_decision(
    path: str, rel: str, active: tuple[GitIgnore, ...], options: DiscoveryOptions
) -> Candidate | Skipped:
    name = rel.rsplit("/", 1)[-1]
    if options.secret_guard and (reason := secret_name_reason(rel)):
        return Skipped(rel, reason)
    if (pattern := _matching(rel, False, options._exclude_re)) is not None:
        return Skipped(rel, f"excluded by {pattern!r}")
    if active and _ignored(rel, False, active):
        return Skipped(rel, "ignored by .gitignore")
    if options.include:
        if not _included(rel, options):
            return Skipped(rel, "not matched by the include patterns")
        return Candidate(path, rel, format_for(name))
    ext = os.path.splitext(name)[1].lower()
    if ext in options.extensions or name in options.filenames:
        return Candidate(path, rel, format_for(name))
    return Skipped(rel, f"extension {ext!r} not in the allow-list" if ext else "no extension, not in the allow-list")


def single_file(path: str, options: DiscoveryOptions) -> Candidate | Skipped:
    """The decision for a file named explicitly: no allow-list, no ignore files.

    The file is resolved once, here; it is read at that resolved path and
    must be the file seen now (a :class:`FoundPath` given stays pinned to
    the file it names).
    """
    name = os.path.basename(path)
    if _has_surrogates(name):
        return Skipped(_printable(name), "file name is not valid UTF-8")
    if options.secret_guard and (reason := secret_name_reason(os.path.abspath(path).replace(os.sep, "/"))):
        return Skipped(name, reason)
    real = resolved(path)
    if real is None:
        return Skipped(name, "changed while being resolved", transient=True)
    try:
        st = os.stat(real)
    except OSError:
        return Skipped(name, "not a regular file")
    if not stat.S_ISREG(st.st_mode):
        return Skipped(name, "not a regular file")
    seen = _ident(st)
    if isinstance(path, FoundPath) and (path.real, path.ident) != (real, seen):
        return Skipped(name, "changed since it was checked (swapped or now a symlink)", transient=True)
    return Candidate(FoundPath(path, real, seen), name, format_for(name))

"""A knowledge base's sources and chunks as it holds them.

:class:`Doc` is one source, :class:`ChunkTable` the chunks as columns by chunk
id.  After a load, :class:`LoadedSources` makes a saved source's ``Doc`` (and
decodes its name) only when something needs it, and :class:`ChunkDocs` finds a
chunk's ``Doc`` from its id: a big index has hundreds of thousands of sources
and a search shows ten, so making every ``Doc`` at load was most of a load's
time and memory.  Whatever needs every source (the name map, a save, a filter)
makes them all at once.  :class:`SourceMap` is the one record of which
sources are held, by name.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain, repeat
from operator import attrgetter, sub
from typing import Any, NamedTuple

from .._exceptions import IndexFormatError
from .._storage._codec import Ints, NameIndex, SourceColumns, SourceStore, copy_array
from .._storage._stored import Offsets

__all__ = ["ChunkDocs", "ChunkTable", "Doc", "LoadedSources", "SourceMap"]


class Doc(NamedTuple):
    """One source.  A loaded one keeps its text and fingerprint in the mapped
    data file (``store``, at ``number``) and decodes them on demand: most
    sources of a big index are never shown."""

    source: str
    own_text: str | None
    own_metadata: dict[str, Any] | None
    own_fingerprint: str | None
    number: int = -1
    store: SourceStore | None = None
    # A new source's chunk ids, appended as it is chunked; a loaded one's are a range.
    own_cids: Sequence[int] | None = None
    first_chunks: Ints | None = None

    @property
    def text(self) -> str:
        if self.own_text is not None:
            return self.own_text
        assert self.store is not None
        return self.store.text(self.number)

    def span(self, start: int, end: int) -> str:
        """``text[start:end]``, reading only that range of a loaded ASCII text."""
        if self.own_text is not None:
            return self.own_text[start:end]
        assert self.store is not None
        return self.store.span(self.number, start, end)

    @property
    def stored(self) -> str | bytes | memoryview:
        """The text, or its UTF-8 bytes when still in the data file (what a save copies)."""
        if self.own_text is not None:
            return self.own_text
        assert self.store is not None
        return self.store.raw(self.number)

    @property
    def chars(self) -> int:
        if self.own_text is not None:
            return len(self.own_text)
        assert self.store is not None
        return self.store.char_count(self.number)

    @property
    def metadata(self) -> dict[str, Any]:
        return {} if self.own_metadata is None else self.own_metadata

    @property
    def fingerprint(self) -> str:
        if self.own_fingerprint is not None:
            return self.own_fingerprint
        assert self.store is not None
        return self.store.fingerprint(self.number)

    @property
    def cids(self) -> Sequence[int]:
        if self.own_cids is not None:
            return self.own_cids
        firsts = self.first_chunks
        assert firsts is not None
        return range(firsts[self.number], firsts[self.number + 1])


class LoadedSources:
    """The sources of a loaded index by number, each made into a :class:`Doc`
    when first asked for and kept.

    ``owners`` is the saved chunk table's source column.  ``firsts`` are the
    runs of chunk ids per source (``n + 1`` offsets) when the chunks are laid
    out source by source, as saves do: a chunk's source is then found in
    them.  Otherwise ``lists`` holds each source's chunk ids.
    """

    __slots__ = ("_all", "_cols", "_firsts", "_lists", "_made", "_owners", "_runs")

    def __init__(self, cols: SourceColumns, owners: Ints, firsts: Ints | None, lists: list[list[int]] | None) -> None:
        self._cols = cols
        self._owners = owners
        self._firsts = firsts
        self._lists = lists
        # The saved runs, checked as read: one source's when its Doc is made, all
        # before a chunk's source is looked up in them or every Doc is made.
        self._runs: Offsets | None = cols.chunk_runs if firsts is cols.first_chunks else None
        self._made: dict[int, Doc] = {}
        self._all: list[Doc] | None = None  # every source, once something needed them all

    def __len__(self) -> int:
        return len(self._cols.chars)

    @property
    def n_chunks(self) -> int:
        return len(self._owners)

    @property
    def made(self) -> int:
        """How many sources have a :class:`Doc` so far."""
        return len(self) if self._all is not None else len(self._made)

    def doc(self, number: int) -> Doc:
        everything = self._all
        if everything is not None:
            return everything[number]
        doc = self._made.get(number)
        if doc is None:
            doc = self._made[number] = self._make(number)
        return doc

    def doc_of(self, cid: int) -> Doc:
        """The source of loaded chunk ``cid``."""
        firsts = self._firsts
        if firsts is None:
            return self.doc(self._owners[cid])
        # The runs are checked whole (O(sources), once): a run checked alone could
        # hold a chunk that another, out of order, also holds.
        self._check_runs()
        return self.doc(bisect_right(firsts, cid) - 1)

    def _check_runs(self) -> None:
        if self._runs is not None:
            self._runs.check_all()
            self._runs = None

    def _make(self, i: int) -> Doc:
        if self._runs is not None:
            self._runs.pair(i)  # the run its Doc reads
        cols = self._cols
        texts, fps = cols.texts, cols.fingerprints
        store = texts if isinstance(texts, SourceStore) else None
        text = None if isinstance(texts, SourceStore) else texts[i]
        assert text is None or isinstance(text, str)  # a snapshot held in memory gives str
        return Doc(
            cols.names[i],
            text,
            cols.metadata[i],
            None if isinstance(fps, SourceStore) else fps[i],
            i,
            store,
            None if self._lists is None else self._lists[i],
            self._firsts,
        )

    def everything(self) -> list[Doc]:
        """Every source's :class:`Doc` by number (those already made are kept)."""
        if self._all is not None:
            return self._all
        self._check_runs()
        cols = self._cols
        n = len(self)
        texts, fps = cols.texts, cols.fingerprints
        store = texts if isinstance(texts, SourceStore) else None
        own_texts: Any = repeat(None) if isinstance(texts, SourceStore) else texts
        fields = zip(
            cols.names,
            own_texts,
            cols.metadata,
            repeat(None) if isinstance(fps, SourceStore) else fps,
            range(n),
            repeat(store),
            repeat(None) if self._lists is None else self._lists,
            repeat(self._firsts),
        )
        # tuple.__new__ straight from the columns: no Python call per source.
        docs: list[Doc] = list(map(tuple.__new__, repeat(Doc), fields))
        for number, doc in self._made.items():
            docs[number] = doc
        self._all = docs
        self._made = {}
        return docs

    def chunk_docs(self) -> Iterator[Doc]:
        """Every loaded chunk's source, by chunk id."""
        docs = self.everything()  # (runs checked)
        firsts = self._firsts
        if firsts is None:
            return map(docs.__getitem__, self._owners)
        # Each source repeated over its run of chunks, in one C-level pass.
        return chain.from_iterable(map(repeat, docs, map(sub, firsts[1:], firsts[:-1])))


class SourceMap:
    """The sources held, by name: the one record of them.

    A new knowledge base keeps a dict.  A loaded one keeps its first
    segment's sources by number (:class:`LoadedSources`), found by name in
    that segment's sorted names (``names()``), with those removed since
    (``hidden``) and those of later segments or added since (``extra``),
    until something needs every source by name: then the dict is made.
    """

    __slots__ = ("_extra", "_hidden", "_map", "_names", "loaded", "where")

    def __init__(self) -> None:
        self._map: dict[str, Doc] | None = {}
        self.loaded: LoadedSources | None = None
        self._names: Callable[[], NameIndex | None] = lambda: None
        self._hidden: set[int] = set()  # numbers of the loaded sources removed
        self._extra: dict[str, Doc] = {}
        self.where = "index"  # named in errors

    def adopt(self, loaded: LoadedSources, names: Callable[[], NameIndex | None], where: str) -> None:
        """Hold ``loaded`` by number (nothing made yet), found by name through ``names()`` while it gives them."""
        self._map, self.loaded, self._names, self.where = None, loaded, names, where
        self._hidden, self._extra = set(), {}

    @property
    def mapped(self) -> bool:
        """Whether every source is in the name dict (made when something needed them all)."""
        return self._map is not None

    def all(self) -> dict[str, Doc]:
        """Every source by name (the first call after a load makes them all)."""
        docs = self._map
        if docs is None:
            assert self.loaded is not None
            loaded = self.loaded.everything()
            if self._hidden:
                hidden = self._hidden
                loaded = [doc for i, doc in enumerate(loaded) if i not in hidden]
            docs = dict(zip(map(attrgetter("source"), loaded), loaded))
            n = len(docs) + len(self._extra)
            docs.update(self._extra)
            if len(docs) != len(loaded) + len(self._extra) or len(docs) != n:
                raise IndexFormatError(f"{self.where}: the index names a source twice")
            self._extra = {}
            self._map = docs
        return docs

    def get(self, source: str, *, pop: bool = False) -> Doc | None:
        """The source's :class:`Doc` (taken out with ``pop``), found in the loaded segment's sorted
        names when it can be: an add or a remove then makes no other ``Doc``."""
        names = self._names()
        if self._map is not None or names is None or self.loaded is None:
            return self.all().pop(source, None) if pop else self.all().get(source)
        doc = self._extra.pop(source, None) if pop else self._extra.get(source)
        if doc is None:
            number = names.find(source)
            if number is None or number in self._hidden:
                return None
            doc = self.loaded.doc(number)
            if pop:
                self._hidden.add(number)
        return doc

    def hide(self, number: int) -> None:
        """Loaded source ``number`` is deleted (a load's deletion mark)."""
        self._hidden.add(number)

    def put(self, doc: Doc) -> None:
        if self._map is None:
            self._extra[doc.source] = doc
        else:
            self._map[doc.source] = doc

    def __contains__(self, source: object) -> bool:
        if self._map is not None:
            return source in self._map
        return isinstance(source, str) and self.get(source) is not None


class ChunkDocs:
    """Each chunk's :class:`Doc` by chunk id, None once removed (a list's
    subscripts, ``append`` and iteration): the loaded chunks' from their
    :class:`LoadedSources`, made on demand, then those added since."""

    __slots__ = ("_added", "_loaded", "_n", "_removed")

    def __init__(self, loaded: LoadedSources | None = None) -> None:
        self._loaded = loaded
        self._n = 0 if loaded is None else loaded.n_chunks
        self._removed: bytearray | None = None  # a flag per loaded chunk, from the first removal
        self._added: list[Doc | None] = []

    def __len__(self) -> int:
        return self._n + len(self._added)

    def _cid(self, cid: int) -> int:
        if cid < 0:
            cid += len(self)
            if cid < 0:
                raise IndexError("chunk id out of range")
        return cid

    def __getitem__(self, cid: int) -> Doc | None:
        cid = self._cid(cid)
        if cid >= self._n:
            return self._added[cid - self._n]
        if self._removed is not None and self._removed[cid]:
            return None
        assert self._loaded is not None
        return self._loaded.doc_of(cid)

    def __setitem__(self, cid: int, doc: Doc | None) -> None:
        cid = self._cid(cid)
        if cid >= self._n:
            self._added[cid - self._n] = doc
            return
        if doc is not None:
            raise ValueError("a loaded chunk keeps its source: it can only be removed (None)")
        if self._removed is None:
            self._removed = bytearray(self._n)
        self._removed[cid] = 1

    def append(self, doc: Doc) -> None:
        self._added.append(doc)

    def extend(self, docs: Iterable[Doc]) -> None:
        self._added.extend(docs)

    def live(self, cid: int) -> bool:
        """Whether chunk ``cid`` exists and was not removed (makes no :class:`Doc`)."""
        if not 0 <= cid < len(self):
            return False
        if cid >= self._n:
            return self._added[cid - self._n] is not None
        return self._removed is None or not self._removed[cid]

    def __iter__(self) -> Iterator[Doc | None]:
        if self._loaded is None:
            return iter(self._added)
        loaded: Iterator[Doc | None] = self._loaded.chunk_docs()
        removed = self._removed
        if removed is not None:
            loaded = (None if gone else doc for doc, gone in zip(loaded, removed))
        return chain(loaded, self._added)


class ChunkTable:
    """Chunks as parallel columns indexed by chunk id (cheap to load and to keep).

    A load hands over its chunk columns still in the data file (:meth:`adopt`):
    they are copied (their blocks checked) only when a column is first read,
    and the loaded chunks' bound checks (O(chunks), see ``_codec.ChunkBounds``)
    run before ``start`` or ``end`` is first read.  Chunks appended before
    then wait in columns of their own, so a load + add + commit reads neither.
    A hit reads its chunk's :meth:`row` in place, with that chunk's checks only.
    """

    __slots__ = ("_cols", "_loaded", "_n_loaded", "_rows", "doc", "section", "unchecked")

    def __init__(self) -> None:
        self.doc = ChunkDocs()
        # index, start, end, start_line, end_line: every chunk's, or only those
        # appended since a load while the loaded ones are still in the data file.
        self._cols: list[array[int]] = [array("i"), array("q"), array("q"), array("i"), array("i")]
        self._loaded: Callable[[], Sequence[Ints]] | None = None
        self._n_loaded = 0
        self._rows: Callable[[int], tuple[int, int, int, int, int]] | None = None
        self.section: list[str | None] = []
        self.unchecked: Callable[[], None] | None = None

    def adopt(
        self,
        columns: Callable[[], Sequence[Ints]],
        n: int,
        unchecked: Callable[[], None] | None,
        rows: Callable[[int], tuple[int, int, int, int, int]] | None = None,
    ) -> None:
        """Take a load's ``n`` chunks: ``columns()`` gives their index, start, end, start_line
        and end_line columns, checked; ``unchecked()`` checks their bounds; ``rows(cid)``
        one chunk's five values, read in place with that chunk's checks (see :meth:`row`)."""
        self._loaded = columns
        self._n_loaded = n
        self.unchecked = unchecked
        self._rows = rows

    def __len__(self) -> int:
        return len(self.doc)

    def _columns(self) -> list[array[int]]:
        loaded = self._loaded
        if loaded is not None:
            whole = [copy_array(col.typecode, view) for col, view in zip(self._cols, loaded())]
            for col, added in zip(whole, self._cols):
                col.extend(added)
            self._cols = whole
            self._loaded = None
        return self._cols

    @property
    def index(self) -> array[int]:
        return self._columns()[0]

    @property
    def start(self) -> array[int]:
        if self.unchecked is not None:
            self._check()
        return self._columns()[1]

    @property
    def end(self) -> array[int]:
        if self.unchecked is not None:
            self._check()
        return self._columns()[2]

    @property
    def start_line(self) -> array[int]:
        return self._columns()[3]

    @property
    def end_line(self) -> array[int]:
        return self._columns()[4]

    def row(self, cid: int) -> tuple[int, int, int, int, int]:
        """Chunk ``cid``'s index, start, end, start_line and end_line.

        While a load's columns are still in the data file, a loaded chunk's row
        is read in place with its own checks, and an added one's from the
        added columns: a search's few hits copy and check no whole column.
        """
        n = self._n_loaded
        if self._loaded is not None:
            if cid >= n:
                at, cols = cid - n, self._cols
                return cols[0][at], cols[1][at], cols[2][at], cols[3][at], cols[4][at]
            if self._rows is not None:
                return self._rows(cid)
        return self.index[cid], self.start[cid], self.end[cid], self.start_line[cid], self.end_line[cid]

    def _check(self) -> None:
        assert self.unchecked is not None
        self.unchecked()
        self.unchecked = None

    def added_rows(self, first: int, cids: Sequence[int]) -> list[list[int]]:
        """Index, start, end, start_line and end_line of chunks ``cids``, all ``first``
        or later (added since a load: the loaded ones need not be read nor checked)."""
        if any(cid < first for cid in cids):
            raise ValueError(f"a chunk before {first} was asked for")
        base = self._n_loaded if self._loaded is not None else 0
        at = [cid - base for cid in cids]
        return [list(map(col.__getitem__, at)) for col in self._cols]

    def append(
        self, doc: Doc, index: int, start: int, end: int, start_line: int, end_line: int, section: str | None
    ) -> int:
        cid = len(self.doc)
        self.doc.append(doc)
        cols = self._cols
        cols[0].append(index)
        cols[1].append(start)
        cols[2].append(end)
        cols[3].append(start_line)
        cols[4].append(end_line)
        self.section.append(section)
        return cid

    def extend(
        self, docs: Iterable[Doc], index: Iterable[int], bounds: array[int], sections: Iterable[str | None]
    ) -> int:
        """:meth:`append` of several chunks: ``bounds`` holds start, end,
        start_line and end_line of each; returns the first one's id."""
        first = len(self.doc)
        self.doc.extend(docs)
        cols = self._cols
        cols[0].extend(index)
        cols[1].extend(bounds[0::4])
        cols[2].extend(bounds[1::4])
        cols[3].fromlist(bounds[2::4].tolist())
        cols[4].fromlist(bounds[3::4].tolist())
        self.section.extend(sections)
        return first

    def live(self, cid: int) -> bool:
        return self.doc.live(cid)

    def text(self, cid: int) -> str:
        doc = self.doc[cid]
        assert doc is not None
        return doc.span(self.start[cid], self.end[cid])


def source_fingerprint(text: str, metadata: Mapping[str, Any], sections: object, content: str | None) -> str:
    """The fingerprint a source is stored under: its text (or what it was read from), metadata and sections."""
    # ``content`` (a hash of what the text was read from) stands in for
    # the text, which then needs no second pass of hashing.
    if content is None:
        h = hashlib.sha256(text.encode("utf-8", "surrogatepass"))
    else:
        h = hashlib.sha256(b"content\0" + content.encode("utf-8", "surrogatepass"))
    if metadata:
        h.update(b"\0" + json.dumps(metadata, sort_keys=True, ensure_ascii=True).encode("ascii"))
    if sections is not None:
        h.update(b"\1" + repr(sections).encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]

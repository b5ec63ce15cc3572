"""The index engine: postings, BM25, exact top-k.

Job: the inverted index, split writer / reader / search as tantivy splits
it: the columns and their growth (``_building``), reads and removals
(``_sweeping``, with the one record of removed chunks in ``_held``), lazily
current impacts and the accessors the search reads (``_index``),
the frozen reader over packed or mapped lists (``_packed_lists``) and the
pruned exact top-k over the index's accessors (``_search``, with a term's
impacts at given chunks from ``_lookups`` and impact orders from
``_orders``), the chunks' length norms (``_norms``); BM25 and its
variants as small pure functions (``_scoring``), the pure bound helpers of
the search (``_pruning``), the one definition of a chunk's term counts (``_counting``),
the bulk impact pass of a fresh build (``_bulk_impacts``) and its cheaper array
fills (``_fill``), scoring with a
whole collection's statistics (``_collection``, the sharded index's hook),
the chunk and source tables (``_sources``), the index's self-filling dicts
(``_vocab``), a cheap save's bookkeeping: what a commit holds and what
changed since (``_commits``), segments replayed into an index and the
postings added since a commit (``_replay``); and a knowledge base's corpus
with the index writer that changes it (``_writing``) and the protocol the
ingest uses the writer through (``_prepared``).

May import: ``_text``, ``_storage`` and the leaves.  Must not import: the
knowledge base, ingestion, or anything that generates or serves.
"""

"""The index engine: postings, BM25, exact top-k.

Job: the inverted index (``_index``), BM25 and its variants as small pure
functions (``_scoring``), the pruning helpers of the exact top-k search
(``_pruning``), the one definition of a chunk's term counts (``_counting``),
the bulk impact pass of a fresh build (``_bulk_impacts``), scoring with a
whole collection's statistics (``_collection``, the sharded index's hook),
the chunk and source tables (``_sources``), the index's self-filling dicts
(``_vocab``), and a cheap save's bookkeeping: what a commit holds and what
changed since (``_commits``), segments replayed into an index and the
postings added since a commit (``_replay``).

May import: ``_text``, ``_storage`` and the leaves.  Must not import: the
knowledge base, ingestion, or anything that generates or serves.
"""

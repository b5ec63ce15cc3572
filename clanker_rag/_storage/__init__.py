"""Storage: the index's bytes on disk.

Job: the on-disk format as typed values (``_codec``: what a load reads, the
current format only), what a save writes (``_writer``: a whole index, a
segment of what changed, a commit point, merges on disk), segments, commit
points, block checksums and merge policy (``_segments``), atomic checksummed
writes and mapped loads (``_store``), the inter-process writer lock
(``_lock``), the impact lookup tables a save writes and a query builds
(``_impact_tables``), compressed stored texts (``_texts``, a big save's in a
forked child: ``_texts_child``), narrow columns of term frequencies and
impact orders (``_tf_column``, ``_order_column``), the save walk over
posting lists (``_lists``), and the conversion of a folder saved in an
older format (``_upgrade``, imported only by ``clanker-rag upgrade``).

May import: the package's leaves.  Must not import: the engine, the
knowledge base or anything above; storage knows bytes and typed columns,
never how they are scored.
"""

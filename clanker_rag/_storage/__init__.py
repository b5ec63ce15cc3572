"""Storage: the index's bytes on disk.

Job: the on-disk format as typed values (``_codec``: manifest, data file,
format versions), atomic checksummed saves and mapped loads (``_store``), the
inter-process writer lock (``_lock``), and the impact lookup tables a save
writes and a query builds (``_impact_tables``).

May import: the package's leaves.  Must not import: the engine, the
knowledge base or anything above; storage knows bytes and typed columns,
never how they are scored.
"""

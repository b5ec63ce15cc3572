"""The cluster's shards: where a sharded index's shards live and what runs next to them.

Job: placing sources on shards, shards held in this process and the
functions that run on a shard (``_shards``), shards held on Dask workers
(``_dask_shards``), what a shard folder records of itself (``_identity``),
and bounded waits on a cluster (``_waits``).  The public
``ShardedKnowledgeBase`` is in :mod:`clanker_rag.cluster`; Dask itself is
imported only when a cluster is used.

May import: ``_kb``, ``_engine``, ``_ingest`` and the leaves.  Must not
import: serving, answering or the CLI.
"""

"""Ingestion: from a folder of files to chunks a knowledge base adds.

Job: the ingest run (``_run``: plan, read, replace each file's source whole,
checkpoints, the report), walking a tree safely (``_discovery``), the worker
processes that read and count in parallel (``_parallel``), the parallel bulk
add behind ``add_texts(jobs=)`` (``_parallel_add``) and the file readers
(``_readers/``).

May import: ``_text``, ``_engine`` (counting only), the leaves.  Must not
import: ``_kb`` at module level (the knowledge base calls in; the ingest
receives it as an argument), nor anything that generates or serves.
"""

"""Ingestion: from a folder of files to chunks a knowledge base adds.

Job: the ingest run (``_run``: plan, read, replace each file's source whole,
checkpoints), its settings (``_options``) and report (``_report``), walking a
tree safely (``_discovery``), the worker processes that read and count in
parallel (``_parallel``), the parallel bulk add behind ``add_texts(jobs=)``
(``_parallel_add``), live sync (``_scan``, ``_watch``) and the file readers
(``_readers/``).

May import: ``_text``, ``_engine`` (counting and the writer protocol,
``_prepared``), the leaves.  Must not import: ``_kb`` at module level (the
knowledge base calls in; the ingest receives it as ``Sources`` and its
writer as a ``PreparedWriter``), nor anything that generates or serves.
"""

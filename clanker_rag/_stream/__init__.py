"""The stream controller: splicing retrieved text into a model's output.

Job: the generation protocol between controller and backends (``_generate``),
the retrieval-call formats of model families (``_dialects``), the incremental
call scanners (``_scanner``), the one builder of injected
blocks and the guard on retrieved text (``_blocks``), the controller's typed
settings (``_settings``), the events a turn reports (``_events``), and the I/O-free turn logic with its sync and async
drivers (``_controller``).

May import: ``_retrieval`` (fusion), ``_text`` (sentence ends), ``_types``
and the leaves.  Must not import: backends, answering, serving or the CLI.
Backends import only ``_generate`` from here.
"""

"""The ``clanker-rag`` command.

Job: the command line (``_main``: ingest, search, explain, stats, serve, eval,
create/list/delete...), ``clanker-rag demo`` (``_demo``), terminal output
that cannot drive the terminal (``_terminal``), named knowledge bases under
one data directory (``_named_kbs``), the cluster's commands
(``_cluster_commands``) and ``backup``/``restore`` (``_backup``).

May import: everything below it.  Must not be imported by anything in the
package (``__main__`` and the ``clanker-rag`` entry point call :func:`main`).  The
CLI configures logging; the library never does.
"""

from ._main import main

__all__ = ["main"]

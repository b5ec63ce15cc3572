"""Stopping distributed's offload thread between test modules without breaking later ones."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor


def stop_offload_thread() -> None:
    """Stop the one offload thread distributed keeps for the process's life once a client ran.

    Other tests decide how to start worker processes by whether threads run
    (``clanker_rag._ingest._parallel``), so the thread must go; but a module
    that runs a cluster after this one still needs an executor, so a fresh
    one takes its place (its thread starts only when something is offloaded).
    ``distributed.utils.offload`` reads the module global at each call.
    """
    import distributed.utils

    distributed.utils._offload_executor.shutdown(wait=True)
    distributed.utils._offload_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="Dask-Offload")

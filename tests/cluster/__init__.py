"""Sharded indexes and their Dask deployments (threads and separate processes)."""

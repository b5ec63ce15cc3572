"""Ingestion: readers, parallel and bulk runs, interrupts, and watching a folder."""

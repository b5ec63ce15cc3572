"""The in-memory index: scoring, pruning, impacts, removals, and any history of changes."""

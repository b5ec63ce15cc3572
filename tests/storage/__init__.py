"""The saved index: codec, segments and commits, columns, texts, and what damage and races do."""

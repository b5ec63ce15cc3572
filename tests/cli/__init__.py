"""The ``clanker-rag`` command: every subcommand, its output, and the documented first hour."""

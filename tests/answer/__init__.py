"""Answer drafting: grammars, picking, windows, the learned chooser, and the answers with a real model."""

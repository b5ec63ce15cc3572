"""The streaming controller, the tag scanner, the injected blocks, and the model backends."""

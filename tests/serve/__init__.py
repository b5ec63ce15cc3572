"""The OpenAI-compatible proxy: streaming, native tools, access, sockets, and a real llama.cpp upstream."""

"""Adapters for agent frameworks, each behind its own optional extra.

* :mod:`clanker_rag.integrations.langchain` - a LangChain retriever
  (``pip install 'clanker-rag[langchain]'``);
* :mod:`clanker_rag.integrations.llama_index` - a LlamaIndex retriever
  (``pip install 'clanker-rag[llama-index]'``).

This package imports neither framework; each submodule imports its own when
it is imported, and says what to install when it is missing.  The MCP server
is the ``clanker-rag mcp`` command (extra ``[mcp]``).
"""

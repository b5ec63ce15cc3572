"""The agent-framework adapters: MCP, LangChain, LlamaIndex."""

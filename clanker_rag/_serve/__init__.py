"""Serving: the OpenAI-compatible proxy and index following.

Job: ``clanker-rag serve`` (``_proxy``), the proxy's HTTP side (``_handler``)
and its SSE and JSON sinks (``_sinks``), what a llama.cpp upstream says of its
model (``_served``), the upstream side (``_upstream``), retrieval
through native tool calls (``_native_tools``), following an index folder
other processes save (``_follow``), and who may talk to an HTTP server at all
(``_access``: host, origin and body-type checks, the bearer token); the last
two are shared with the MCP server.  ``_deadlines`` closes proxy connections
whose request headers do not arrive in time.  ``_web`` holds the pages the
proxy also serves (search, sources, a live trace of every injection) and the
browse-only server ``serve`` runs without an upstream.

May import: ``_answer``, ``_stream``, ``_kb``, ``_storage``, ``_text``, ``_http`` (the
one HTTP client, for the upstream) and the leaves.
Must not import: the CLI, the cluster or the integrations.
"""

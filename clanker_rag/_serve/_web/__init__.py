"""The proxy's web pages: search the knowledge base, browse its sources, watch every injection live.

Job: the pages ``clanker-rag serve`` answers on ``GET /``, ``/sources`` and
``/trace`` (static HTML, CSS and JavaScript shipped in ``static/``, no build
step, nothing fetched from elsewhere), the JSON and server-sent-event
endpoints under ``/clanker-rag/`` they read (``_api``), and the bounded
in-memory record of the requests the proxy handled (``_trace``).

May import: ``_sse``, ``_types``, ``_validate``, ``_stream._events`` (the
events a trace records), ``_serve._access`` and ``_serve._deadlines`` (the
browse-only server's checks and connection limits).
Must not import: the rest of ``_serve`` (the handler imports this), the CLI,
the cluster or the integrations.
"""

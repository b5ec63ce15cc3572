"""Retrieval beyond BM25: fusion, dense vectors, reranking, evaluation.

Job: reciprocal rank fusion and multi-query retrieval (``_fusion``), loading
sentence-transformers models (``_embed``, the ``rerank`` extra), dense
embeddings beside an index and the hybrid retriever (``_dense``), second-stage
reranking (``_rerank``), reranking by term proximity (``_proximity``), hits
cut to the lines around the query's words (``_focus``) and BEIR-layout
evaluation (``_eval``).

May import: ``_kb``, ``_storage`` and the layers below.  Must not import: the
stream controller, answering, serving or the CLI; consumers reach these
through the ``Retriever`` protocol.
"""

"""Answering one question with a small model.

Job: ``clanker-rag ask`` (``_ask``), the prompts for base and chat models
(``_prompts``), focusing a hit on the lines that answer (``_focusing``), the
llama.cpp grammars that make a base model copy from its passage
(``_grammars``), the kind of answer a question expects (``_answer_types``) and
noticing an answer that repeats itself (``_repetition``).

May import: ``_stream``, ``backends``, ``_retrieval`` (reranking what ``ask``
retrieves), ``_text``, ``_http`` (the server probe) and the leaves.  Must not
import: serving, the cluster or the CLI.
"""

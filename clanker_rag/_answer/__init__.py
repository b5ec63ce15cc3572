"""Answering one question with a model server: ``clanker-rag ask``, the demo and the proxy's base-model branch.

Job: probing the server and driving it (``_ask``), the settings
(``_settings``), the prompts for base and chat models (``_prompts``), cutting
each hit to the window that answers (``_focusing``: a passage's sentences in
``_sentences``, what a sentence takes with it in ``_windows``, the learned
window chooser in ``_learned``), what kind of answer a question asks for
(``_kinds``), the llama.cpp grammars that make a base model copy from its
passages (``_grammars``) and noticing an answer that repeats itself
(``_repetition``).

May import: ``_stream``, ``backends``, ``_retrieval`` (reranking what ``ask``
retrieves), ``_text``, ``_http`` (the server probe) and the leaves.  Must not
import: serving, the cluster or the CLI; nothing in the core imports it.
"""

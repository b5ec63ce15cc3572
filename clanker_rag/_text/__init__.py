"""Text analysis: from a string to index terms, and from a document to chunks.

Job: tokenising, identifier splitting, stop words, the Snowball English
stemmer (``_analysis``, ``_stemmer``, ``_stopwords``), the chunker that cuts
token windows while keeping the original text (``_chunking``) and the
incremental sentence splitter that finds whole questions (``_sentences``).

May import: the package's leaves (``_exceptions``, ``_types``, ``_validate``).
Must not import: anything that stores, indexes, reads files or talks to a
model; text analysis is pure and is shared by the index, the ingest workers
and the answer code.
"""

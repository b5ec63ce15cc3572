"""What users of the peers expect: LangChain's ``from_texts``/``from_documents`` and LlamaIndex's
``from_defaults(nodes=...)``, ``persist()`` and ``from_persist_dir()`` on our retrievers (issue 45 item 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("langchain_core", reason="needs the langchain extra: pip install 'clanker-rag[langchain]'")
pytest.importorskip("llama_index.core", reason="needs the llama-index extra: pip install 'clanker-rag[llama-index]'")

from langchain_core.documents import Document
from llama_index.core.schema import Document as LlamaDocument
from llama_index.core.schema import TextNode

from clanker_rag import ConfigError, KnowledgeBase
from clanker_rag.integrations import langchain, llama_index

TEXTS = [
    "Rotate the signing keys every ninety days.",
    "Water the tomato plants every morning in summer.",
    "Keys to the garden shed hang by the door.",
]


def test_langchain_from_texts_indexes_each_text_with_its_metadata() -> None:
    retriever = langchain.KnowledgeBaseRetriever.from_texts(
        TEXTS, metadatas=[{"team": "ops"}, {"team": "home"}, {"team": "home"}], k=2, where={"team": "home"}
    )
    docs = retriever.invoke("keys")
    assert [d.page_content for d in docs] == [TEXTS[2]]
    assert docs[0].metadata["source"] == "text-2" and docs[0].metadata["metadata"] == {"team": "home"}


def test_langchain_from_documents_names_sources_by_id_else_by_file_and_place(tmp_path: Path) -> None:
    documents = [
        Document(page_content=TEXTS[0], metadata={"source": "ops.md"}),
        Document(page_content=TEXTS[1], metadata={"source": "ops.md"}),  # a second part of one file
        Document(page_content=TEXTS[2], id="shed"),
    ]
    retriever = langchain.KnowledgeBaseRetriever.from_documents(documents, k=3)
    assert sorted(d.metadata["source"] for d in retriever.invoke("keys tomato")) == ["ops.md#0", "ops.md#1", "shed"]
    retriever.save(tmp_path / "index")
    again = langchain.KnowledgeBaseRetriever(kb=KnowledgeBase.load(tmp_path / "index"), k=1)
    assert again.invoke("garden shed")[0].page_content == TEXTS[2]


def test_langchain_from_texts_refuses_two_texts_under_one_id_and_uneven_lists() -> None:
    with pytest.raises(ConfigError, match="two texts have the id 'a'"):
        langchain.KnowledgeBaseRetriever.from_texts(TEXTS[:2], ids=["a", "a"])
    with pytest.raises(ConfigError, match="3 texts but 1 metadatas"):
        langchain.KnowledgeBaseRetriever.from_texts(TEXTS, metadatas=[{}])


def test_llama_index_from_defaults_persist_and_from_persist_dir(tmp_path: Path) -> None:
    nodes = [TextNode(text=text, id_=f"n{i}", metadata={"i": i}) for i, text in enumerate(TEXTS)]
    retriever = llama_index.KnowledgeBaseRetriever.from_defaults(nodes=nodes, similarity_top_k=1)
    (hit,) = retriever.retrieve("tomato plants")
    assert hit.node.get_content() == TEXTS[1] and hit.node.metadata["source"] == "n1"
    assert hit.node.metadata["metadata"] == {"i": 1}
    retriever.persist(tmp_path / "store")
    again = llama_index.KnowledgeBaseRetriever.from_persist_dir(tmp_path / "store", k=3)
    assert [n.node.metadata["source"] for n in again.retrieve("keys")] == [
        n.node.metadata["source"]
        for n in llama_index.KnowledgeBaseRetriever.from_defaults(nodes=nodes, k=3).retrieve("keys")
    ]
    assert len(again.retrieve("keys")) == 2


def test_llama_index_from_defaults_takes_documents_or_a_kb_but_one_of_them() -> None:
    docs = [LlamaDocument(text=TEXTS[0], id_="d0")]
    score = llama_index.KnowledgeBaseRetriever.from_defaults(documents=docs).retrieve("signing")[0].score
    assert score is not None and score > 0
    kb = KnowledgeBase()
    kb.add_text(TEXTS[1], "garden.md")
    assert llama_index.KnowledgeBaseRetriever.from_defaults(kb=kb).retrieve("tomato")[0].node.metadata["source"] == (
        "garden.md"
    )
    with pytest.raises(ConfigError, match="one of nodes=, documents= or kb="):
        llama_index.KnowledgeBaseRetriever.from_defaults(nodes=[], kb=kb)

"""Retrievers over the index: dense, fusion, proximity, reranking, and evaluation."""

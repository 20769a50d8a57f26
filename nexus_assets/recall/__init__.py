"""Recall and grounded answers (docs/recall.md): embeddings, the vector index, reranking, `nexus recall`
and `nexus ask`. Torch and FAISS are imported only when these run."""

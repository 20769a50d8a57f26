"""Recall and grounded answers (DESIGN §8): embeddings, the vector index, reranking, `nexus recall`
and `nexus ask`. Torch and FAISS are imported only when these run."""

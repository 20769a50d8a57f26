"""The shipped embedding models, below every phase that reads vectors: all-MiniLM-L6-v2 as ONNX
(`embedder.py`: the selector's relevance, bricks' recall and relations) and the static model
distilled from it (`static_embedder.py`: the record's passages). Nothing is fetched at run time."""

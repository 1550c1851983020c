"""The read side of a world's label store (``labels.sqlite``, written by :mod:`hqa.world.label_store`): lookups and the
entity linker over it, which never loads the label set into memory and scores with the pack's own
:class:`~hqa.retrievers.linking.entities.EntityLinker` (the tables and the lookups: docs/worlds.md, "Label store and
linker")."""

from __future__ import annotations

import dataclasses
import functools
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Callable, Iterator

from hqa.data.wikidata import norm_label
from hqa.errors import WorldError
from hqa.retrievers.linking.entities import (QID_MENTION, STOP_WORDS, Candidate, EntityLinker, fuzzy_budget,
                                             id_order, mention_grams, mention_norm, title_keys)

FUZZY_POOL = 4000
STORE_FORMAT = "2"  # 2: names.tail is the key's first letter and last three


class LabelStore:
    """Read-only queries over a finished ``labels.sqlite`` (one connection per thread)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise WorldError(f"label store {self.path} is missing (rebuild the world)")
        self._local = threading.local()
        meta = self.meta()
        if meta.get("format") != STORE_FORMAT:
            raise WorldError(f"label store {self.path} has format {meta.get('format')!r}, this hqa reads "
                             f"{STORE_FORMAT!r}: rebuild the world (hqa world build NAME ... --force)")
        self.max_words = int(meta.get("max_words", "1") or 1)

    @property
    def db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            try:
                db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
                db.execute("SELECT 1 FROM names LIMIT 1")
            except sqlite3.Error as exc:
                raise WorldError(f"label store {self.path} cannot be read: {exc}") from None
            self._local.db = db
        return db

    def meta(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT key, value FROM meta").fetchall())

    def _in(self, sql: str, values: list, extra: tuple = ()) -> list[tuple]:
        out: list[tuple] = []
        for i in range(0, len(values), 500):
            part = values[i: i + 500]
            out.extend(self.db.execute(sql.format(marks=",".join("?" * len(part))), (*part, *extra)).fetchall())
        return out

    def records(self, ids: list[str]) -> dict[str, dict]:
        ids = list(dict.fromkeys(ids))
        rows = self._in("SELECT id, label, description, degree FROM entities WHERE id IN ({marks})", ids)
        return {eid: {"id": eid, "label": label or "", "description": desc or "", "degree": degree or 0}
                for eid, label, desc, degree in rows}

    def _grouped(self, sql: str, values: list) -> dict[str, list]:
        """The rows of ``sql`` grouped by their first column: the rest of each row (one value, or a tuple)."""
        out: dict[str, list] = {}
        for key, *rest in self._in(sql, values):
            out.setdefault(key, []).append(rest[0] if len(rest) == 1 else tuple(rest))
        return out

    def aliases(self, ids: list[str]) -> dict[str, list[str]]:
        return self._grouped("SELECT id, alias FROM aliases WHERE id IN ({marks})", list(dict.fromkeys(ids)))

    def by_keys(self, keys: list[str]) -> dict[str, list[tuple[str, float]]]:
        return self._grouped("SELECT key, id, quality FROM names WHERE key IN ({marks})", keys)

    def by_label(self, keys: list[str]) -> dict[str, list[str]]:
        return self._grouped("SELECT label_norm, id FROM entities WHERE label_norm IN ({marks})", keys)

    def fuzzy_keys(self, gram: str, budget: int) -> list[str]:
        """Keys within ``budget`` edits of ``gram`` (same first letter; a single word never matches a phrase) among
        the bounded pool sharing its first three characters, or its first and last three, and of a length within the
        budget."""
        from rapidfuzz import process
        from rapidfuzz.distance import Levenshtein

        low, high = len(gram) - budget, len(gram) + budget
        pool = {k for (k,) in self.db.execute(
            "SELECT DISTINCT key FROM names WHERE head = ? AND len BETWEEN ? AND ? LIMIT ?",
            (gram[:3], low, high, FUZZY_POOL))}
        pool.update(k for (k,) in self.db.execute(
            "SELECT DISTINCT key FROM names WHERE tail = ? AND len BETWEEN ? AND ? LIMIT ?",
            (gram[:1] + gram[-3:], low, high, FUZZY_POOL)))
        pool = {k for k in pool if k[:1] == gram[:1] and (" " in gram or " " not in k)}
        found = process.extract(gram, list(pool), scorer=Levenshtein.distance, score_cutoff=budget, limit=None)
        return [k for k, _d, _i in found]

    def related_keys(self, key: str) -> list[str]:
        """A bounded pool of keys that may resemble ``key`` as a whole (what the pack linker's WRatio over all labels
        can match): the ``FUZZY_POOL`` best full-text matches of its content words as word prefixes (a label
        containing the mention, "award" in "academy awards"), and the keys sharing its first three characters, its
        first and last three, or a word's first three (a misspelt label)."""
        pool: set[str] = set()
        words = [w for w in key.split() if len(w) >= 3 and w not in STOP_WORDS]
        if words:
            match = " OR ".join('"' + w.replace('"', "") + '"*' for w in dict.fromkeys(words))
            pool.update(k for (k,) in self.db.execute(
                "SELECT key FROM names_fts WHERE names_fts MATCH ? ORDER BY rank LIMIT ?", (match, FUZZY_POOL)))
        probes = {("head", key[:3]), ("tail", key[:1] + key[-3:])} | {("head", w[:3]) for w in words if len(w) >= 4}
        for column, value in sorted(probes):
            pool.update(k for (k,) in self.db.execute(
                f"SELECT DISTINCT key FROM names WHERE {column} = ? LIMIT ?", (value, FUZZY_POOL)))
        return sorted(pool)

    def labels(self, ids: list[str]) -> dict[str, str]:
        """Labels of the given ids (those that have one)."""
        recs = self.records([i for i in ids if isinstance(i, str)])
        return {i: r["label"] for i, r in recs.items() if r.get("label")}

    def contains(self, eid: str) -> bool:
        return self.db.execute("SELECT 1 FROM entities WHERE id = ?", (eid,)).fetchone() is not None

    def count(self) -> int:
        return int(self.meta().get("entities", "0"))


class EntityView(Mapping):
    """The label store's entities as a read-only mapping (``qid in view``, ``view.get(qid)``) without loading them:
    what code reading the pack linker's ``entities`` dict gets from a world."""

    def __init__(self, store: LabelStore):
        self.store = store

    def __getitem__(self, eid: str) -> dict:
        rec = self.store.records([eid]).get(eid) if isinstance(eid, str) else None
        if rec is None:
            raise KeyError(eid)
        return rec

    def __contains__(self, eid: object) -> bool:
        return isinstance(eid, str) and self.store.contains(eid)

    def __iter__(self) -> Iterator[str]:
        return (eid for (eid,) in self.store.db.execute("SELECT id FROM entities"))

    def __len__(self) -> int:
        return self.store.count()


class LabelStoreLinker:
    """Entity linking over a world's label store; the interface of :class:`~hqa.retrievers.linking.entities.EntityLinker`
    (``spot``, ``link``, ``label``, ``labels``, ``title_to_qid``, ``entities``)."""

    SPOT_CACHE = 256  # recent spot results kept: a hop spots its question twice (linking, BM25 over neighbourhoods)

    def __init__(self, path: Path, similarity: Callable[[str, list[str]], list[float]] | None = None):
        self.store = LabelStore(path)
        self.similarity = similarity
        self.entities = EntityView(self.store)
        self._spotted = functools.lru_cache(maxsize=self.SPOT_CACHE)(self._spot)

    # -- candidates ---------------------------------------------------------------------------------------------
    def _local(self, matched: dict[str, set[str]]) -> EntityLinker:
        """A pack linker over just the candidate entities (``id -> the keys that matched it``)."""
        records = self.store.records(list(matched))
        for eid, rec in records.items():
            rec["aliases"] = sorted(matched[eid])
        return EntityLinker([records[e] for e in sorted(records, key=id_order)], self.similarity)

    def candidates(self, question: str) -> dict[str, set[str]]:
        """The entities any n-gram of ``question`` could mention (exactly, fuzzily, or by its whole label)."""
        words = mention_norm(question).split()[:64]
        grams = {gram: n for _i, n, gram, _c in mention_grams(words, self.store.max_words)}
        matched: dict[str, set[str]] = {}
        exact = self.store.by_keys(list(grams))
        _add_matches(matched, exact)
        for gram, n in grams.items():
            budget = fuzzy_budget(gram)
            if gram not in exact and n <= 6 and budget is not None:
                _add_matches(matched, self.store.by_keys(self.store.fuzzy_keys(gram, budget)))
        label_words = norm_label(question).split()
        label_grams = [" ".join(label_words[i: i + n]) for n in range(1, min(self.store.max_words, len(label_words)) + 1)
                       for i in range(len(label_words) - n + 1)]
        for ids in self.store.by_label(label_grams).values():
            for eid in ids:
                matched.setdefault(eid, set())
        return {eid: keys for eid, keys in matched.items() if eid.startswith("Q")}

    # -- the linker interface -----------------------------------------------------------------------------------
    def spot(self, question: str, k: int = 5, mode: str = "default") -> list[Candidate]:
        if k <= 0:
            return []
        # callers may change a candidate; the cache keeps its own
        return [dataclasses.replace(c) for c in self._spotted(question, k, mode)]

    def _spot(self, question: str, k: int, mode: str) -> list[Candidate]:
        return self._local(self.candidates(question)).spot(question, k=k, mode=mode)

    def link(self, mention: str, question: str | None = None, k: int = 5) -> list[Candidate]:
        if m := QID_MENTION.fullmatch(mention or ""):
            return [Candidate.of(self.store.records([m.group(1)]).get(m.group(1), {}), 1.0, mention, m.group(1))]
        key = norm_label(mention)
        if not key:
            return []
        matched: dict[str, set[str]] = {eid: set() for eid in self.store.by_label([key]).get(key, [])}
        alias_key = mention_norm(mention)
        _add_matches(matched, self.store.by_keys([alias_key] + (self.store.related_keys(key) if not matched else [])))
        matched = {e: v for e, v in matched.items() if e.startswith("Q")}
        local = self._local(matched)
        if found := local.link(mention, question, k=k):
            return found
        # no label is close enough (the pack linker's rule): the entities the mention names by a Wikidata alias
        cands = [Candidate.of(e, 0.95, mention, eid)
                 for eid, keys_ in matched.items() if alias_key in keys_ and (e := local.entities.get(eid))]
        cands.sort(key=lambda c: (-float(local.entities[c.id].get("degree", 0)), id_order(c.id)))
        return cands[:k]

    def label(self, qid: str) -> str | None:
        return self.labels([qid]).get(qid)

    def labels(self, ids: list[str]) -> dict[str, str]:
        return self.store.labels(ids)

    def title_to_qid(self, title: str) -> str | None:
        for key in title_keys(title):
            ids = [i for i in self.store.by_label([key]).get(key, []) if i.startswith("Q")] if key else []
            if len(ids) == 1:
                return ids[0]
        return None


def _add_matches(matched: dict[str, set[str]], by_key: dict[str, list[tuple[str, float]]]) -> None:
    """Record, per entity, the name keys that matched it."""
    for key, pairs in by_key.items():
        for eid, _q in pairs:
            matched.setdefault(eid, set()).add(key)


class LabelledSparql:
    """A SPARQL backend whose ``labels(ids)`` come from a world's label store (one SQLite lookup instead of a query
    per batch); everything else is the backend's."""

    def __init__(self, backend, store: LabelStore):
        self.backend = backend
        self.store = store

    def labels(self, ids: list[str]) -> dict[str, str]:
        return self.store.labels(ids)

    def __getattr__(self, name: str):
        return getattr(self.backend, name)


__all__ = ["LabelledSparql", "LabelStore", "LabelStoreLinker", "EntityView"]

"""Entity linkers that are not bound to the offline pack: the Wikibase API (``linker.kind = wikidata``) and the labels
of any SPARQL store (``linker.kind = sparql``, e.g. a local Wikidata copy that needs no API).

Both fetch ``{id, label, description, aliases}`` records on demand and keep them in :attr:`RemoteLinker.entities` (a
cache the agent's GenerateSparql reads like the pack linker's).  Mentions are scored the way the pack linker scores
them — an :class:`~hqa.retrievers.linking.entities.EntityLinker` is built over the fetched records — so linking quality
does not depend on which world the labels come from:

* ``link(mention, question)``: candidates from the remote search (Wikibase ``wbsearchentities``, which matches labels
  and aliases; or an exact label/alias lookup in the store), ranked by match quality and the search engine's rank,
  disambiguated by the similarity of the question to ``label: description`` (as in DETLLM / DIVKNOWQA);
* ``spot(question)``: the question's content n-grams (up to four words, capitalised spans first) are searched, then
  the pack linker's n-gram scorer picks the best non-overlapping mentions among the fetched records;
* ``labels(ids)``: Wikibase ``wbgetentities`` in batches of 50, or one SPARQL query per 50 ids;
* ``title_to_qid(title)``: the Wikipedia sitelink (``wbgetentities&sites=enwiki&titles=``) or an exact label.

Every API call goes through :mod:`hqa.retrievers.http` (cache modes, politeness); a failure raises an
:class:`hqa.retrievers.http.HTTPFailure` whose message the calling tool turns into an observation.
"""

from __future__ import annotations

import json
import math
import re
import threading
from typing import Any, Callable

from hqa.data import wikidata as W
from hqa.errors import EndpointError
from hqa.retrievers.linking.entities import (QID_MENTION, STOP_WORDS, Candidate, EntityLinker, disambiguate, id_order,
                                             mention_norm, norm_label)

Similarity = Callable[[str, list[str]], list[float]]


def question_grams(question: str, max_words: int = 4, limit: int = 12) -> list[str]:
    """Search strings for mention detection: content n-grams of the question (not starting or ending with a stop
    word), capitalised spans first, then longer before shorter; at most ``limit``."""
    words = [w.strip(".'") for w in re.findall(r"[\w'.-]+", question or "")]
    grams: list[tuple[int, int, str]] = []
    for n in range(min(max_words, len(words)), 0, -1):
        for i in range(len(words) - n + 1):
            part = words[i: i + n]
            low = [w.lower() for w in part]
            if low[0] in STOP_WORDS or low[-1] in STOP_WORDS or (n == 1 and len(part[0]) < 3):
                continue
            caps = sum(1 for w in part if w[:1].isupper() and (i > 0 or n > 1 or w.lower() not in STOP_WORDS))
            grams.append((-(caps == n and caps > 0), -n, " ".join(part)))
    return list(dict.fromkeys(g for _c, _n, g in sorted(grams, key=lambda t: (t[0], t[1]))))[:limit]


class RemoteLinker:
    """Linking over records fetched on demand (subclasses say how to search and fetch)."""

    search_k = 5  # candidates a link asks the search for (at least k)
    max_grams = 12  # question n-grams a spot searches

    def __init__(self, similarity: Similarity | None = None):
        self.similarity = similarity
        self.entities: dict[str, dict] = {}
        self._lock = threading.Lock()

    # -- what a world provides --------------------------------------------------------------------------------
    def _search(self, mention: str, limit: int) -> list[dict]:
        raise NotImplementedError

    def _search_many(self, mentions: list[str], limit: int) -> dict[str, list[dict]]:
        return {m: self._search(m, limit) for m in mentions}

    def _fetch(self, ids: list[str]) -> list[dict]:
        raise NotImplementedError

    def _title(self, title: str) -> str | None:
        return None

    # -- the linker interface the programs use ----------------------------------------------------------------
    def _remember(self, records: list[dict]) -> None:
        with self._lock:
            for r in records:
                if r.get("id"):
                    self.entities[r["id"]] = {**self.entities.get(r["id"], {}), **{k: v for k, v in r.items() if v}}

    def label(self, qid: str) -> str | None:
        return self.labels([qid]).get(qid)

    def labels(self, ids: list[str]) -> dict[str, str]:
        ids = [i for i in dict.fromkeys(ids) if re.fullmatch(r"[QP]\d+", i or "")]
        missing = [i for i in ids if not self.entities.get(i, {}).get("label")]
        if missing:
            self._remember(self._fetch(missing))
        return {i: self.entities[i]["label"] for i in ids if self.entities.get(i, {}).get("label")}

    def link(self, mention: str, question: str | None = None, k: int = 5) -> list[Candidate]:
        if m := QID_MENTION.fullmatch(mention or ""):
            self.labels([m.group(1)])
            return [Candidate.of(self.entities.get(m.group(1), {}), 1.0, mention, m.group(1))]
        if not norm_label(mention):
            return []
        found = self._search(mention, max(k, self.search_k))
        self._remember(found)
        key = mention_norm(mention)
        cands = []
        for rank, r in enumerate(found):
            names = [mention_norm(r.get("label", ""))] + [mention_norm(a) for a in r.get("aliases") or ()]
            quality = 1.0 if names[0] == key else 0.95 if key in names else 0.85
            cands.append(Candidate.of(r, quality - 0.02 * rank, mention))
        disambiguate(cands, question, self.similarity)
        cands.sort(key=lambda c: (-c.score, id_order(c.id)))
        return cands[:k]

    def spot(self, question: str, k: int = 5, mode: str = "default") -> list[Candidate]:
        if k <= 0:
            return []
        grams = question_grams(question, limit=self.max_grams)
        records: dict[str, dict] = {}
        for _gram, found in self._search_many(grams, 3).items():
            for rank, r in enumerate(found):
                if r["id"] not in records:
                    # the search engine's rank stands in for the pack's popularity prior (facts per entity)
                    records[r["id"]] = {**r, "degree": math.expm1(max(0.0, 3.0 - rank))}
        self._remember(list(records.values()))
        return EntityLinker(list(records.values()), self.similarity).spot(question, k=k, mode=mode)

    def title_to_qid(self, title: str) -> str | None:
        if qid := self._title(title):
            return qid
        exact = [r for r in self._search(title, 5) if norm_label(r.get("label", "")) == norm_label(title)]
        return exact[0]["id"] if len(exact) == 1 else None


class WikidataLinker(RemoteLinker):
    """The Wikibase Action API (``wbsearchentities``, ``wbgetentities``) at ``api``."""

    def __init__(self, client: Any, api: str = "https://www.wikidata.org/w/api.php", language: str = "en",
                 similarity: Similarity | None = None):
        super().__init__(similarity)
        self.client, self.api, self.language = client, api, language

    def _search(self, mention: str, limit: int) -> list[dict]:
        data = self.client.get_json(self.api, {
            "action": "wbsearchentities", "search": mention[:250], "language": self.language,
            "uselang": self.language, "type": "item", "limit": str(min(max(limit, 1), 50)),
        }, mediawiki=True)
        out = []
        for hit in data.get("search", []) if isinstance(data, dict) else []:
            if not isinstance(hit, dict) or not re.fullmatch(r"Q\d+", str(hit.get("id", ""))):
                continue
            aliases = [str(a) for a in hit.get("aliases") or []]
            match = hit.get("match") or {}
            if match.get("type") == "alias" and match.get("text"):
                aliases.append(str(match["text"]))
            out.append({"id": hit["id"], "label": str(hit.get("label") or ""),
                        "description": str(hit.get("description") or ""), "aliases": list(dict.fromkeys(aliases))})
        return out

    def _entities(self, params: dict[str, str]) -> list[dict]:
        data = self.client.get_json(self.api, {
            "action": "wbgetentities", "props": "labels|descriptions|aliases", "languages": self.language, **params,
        }, mediawiki=True)
        out = []
        for eid, ent in (data.get("entities") or {}).items() if isinstance(data, dict) else []:
            if not isinstance(ent, dict) or "missing" in ent or not re.fullmatch(r"[QP]\d+", str(ent.get("id", eid))):
                continue
            lang = self.language

            def value(field: str) -> str:
                v = (ent.get(field) or {}).get(lang) or {}
                return str(v.get("value") or "") if isinstance(v, dict) else ""

            aliases = [str(a.get("value")) for a in (ent.get("aliases") or {}).get(lang, []) if isinstance(a, dict)]
            out.append({"id": str(ent.get("id", eid)), "label": value("labels"), "description": value("descriptions"),
                        "aliases": aliases})
        return out

    def _fetch(self, ids: list[str]) -> list[dict]:
        # 50: the API's limit for ids per request
        return [e for i in range(0, len(ids), 50) for e in self._entities({"ids": "|".join(ids[i: i + 50])})]

    def _title(self, title: str) -> str | None:
        found = self._entities({"sites": f"{self.language}wiki", "titles": title[:250]})
        self._remember(found)
        return found[0]["id"] if len(found) == 1 and found[0]["id"].startswith("Q") else None


class SparqlLabelLinker(RemoteLinker):
    """Labels, aliases and descriptions of any SPARQL store (rdfs:label, skos:altLabel, schema:description) through
    a :class:`~hqa.retrievers.base.TripleSearch`: exact (case-variant) label or alias lookups, which indexed stores
    answer without a scan."""

    RECORD = """SELECT ?e ?name ?l ?d WHERE {{
  VALUES ?name {{ {values} }}
  ?e <http://www.w3.org/2000/01/rdf-schema#label>|<http://www.w3.org/2004/02/skos/core#altLabel> ?name .
  OPTIONAL {{ ?e <http://www.w3.org/2000/01/rdf-schema#label> ?l . FILTER(LANG(?l) = "{lang}") }}
  OPTIONAL {{ ?e <http://schema.org/description> ?d . FILTER(LANG(?d) = "{lang}") }}
}} LIMIT {limit}"""
    BY_ID = """SELECT ?e ?l ?d WHERE {{
  VALUES ?e {{ {values} }}
  OPTIONAL {{ ?e <http://www.w3.org/2000/01/rdf-schema#label> ?l . FILTER(LANG(?l) = "{lang}") }}
  OPTIONAL {{ ?e <http://schema.org/description> ?d . FILTER(LANG(?d) = "{lang}") }}
}}"""

    def __init__(self, backend: Any, language: str = "en", similarity: Similarity | None = None):
        super().__init__(similarity)
        self.backend, self.language = backend, language

    @staticmethod
    def _variants(mention: str) -> list[str]:
        m = " ".join(mention.split())
        return list(dict.fromkeys([m, m.lower(), m.title(), m[:1].upper() + m[1:]]))

    def _search_many(self, mentions: list[str], limit: int) -> dict[str, list[dict]]:
        mentions = [m for m in mentions if m.strip()]
        if not mentions:
            return {}
        by_variant = {mention_norm(v): m for m in mentions for v in self._variants(m)}
        values = " ".join(f"{json.dumps(v, ensure_ascii=False)}@{self.language}"  # "name"@en literals
                          for m in mentions for v in self._variants(m))
        res = self.backend.run(self.RECORD.format(values=values, lang=self.language, limit=limit * len(mentions) * 4))
        if res.error:
            raise EndpointError(f"label lookup failed: {res.error}")
        out: dict[str, dict[str, dict]] = {m: {} for m in mentions}
        for row in res.rows:
            qid = W.local_id(row.get("e", ""))
            owner = by_variant.get(mention_norm(row.get("name", "")))
            if not qid or not qid.startswith("Q") or owner is None:
                continue
            rec = out[owner].setdefault(qid, {"id": qid, "label": row.get("l", ""), "description": row.get("d", ""),
                                               "aliases": []})
            if row.get("name") and norm_label(row["name"]) != norm_label(rec["label"]):
                rec["aliases"].append(row["name"])
        return {m: sorted(recs.values(), key=lambda r: int(r["id"][1:]))[:limit] for m, recs in out.items()}

    def _search(self, mention: str, limit: int) -> list[dict]:
        return self._search_many([mention], limit).get(mention, [])

    def _fetch(self, ids: list[str]) -> list[dict]:
        out = []
        for i in range(0, len(ids), 50):
            values = " ".join(f"<{W.WD}{x}>" for x in ids[i: i + 50])
            for row in self.backend.run(self.BY_ID.format(values=values, lang=self.language)).rows:
                lid = W.local_id(row.get("e", ""))
                if lid and (row.get("l") or row.get("d")):
                    out.append({"id": lid, "label": row.get("l", ""), "description": row.get("d", "")})
        return out

"""Entity linking: mention → ranked Wikidata ids, labels for ids, and mention spotting in a question.

``link`` (a given mention): candidates come from label lookup (exact match of the normalised label, then fuzzy match
with rapidfuzz).  When several candidates remain they are disambiguated as in DIVKNOWQA: by the similarity between
the question and each candidate's ``label: description`` text (sentence embeddings), added to the string-match score.

``spot`` (mention detection in a question), default mode: every word n-gram of the question is looked up among the
labels and their aliases (the label without a trailing "(…)" qualifier, without a leading article, with "F.C."
spelled "fc"), and n-grams that match nothing exactly are matched fuzzily (Levenshtein distance ≤ 1 for short
mentions, ≤ 2 for longer ones, same first letter).  Each (mention, entity) pair is scored by

    match quality × content words of the mention            (exact 1.0, alias 0.95, fuzzy 0.85)
    + 0.15 · log(1 + facts about the entity in the pack)    (a popularity prior)
    − 0.8 if the label has no capital letter                (a generic concept such as "book", "singer")
    + 0.5 · cosine(question, "label: description")          (the 6 best-scored candidates with a description or
                                                              qualifier)
    + 0.3 if a type cue of the question ("movie", "wrote", "series", …) names the description's type

and the best non-overlapping mentions win.  ``mode="exact"`` is the earlier spotter (exact label n-grams, longest
first), kept as the baseline of ``benchmarks/bench_linking.py``.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hqa.data import wikidata as W
from hqa.data.jsonl import read_jsonl
from hqa.data.wikidata import PUNCT as _PUNCT, WS as _WS, norm_label
from hqa.errors import EndpointError
from hqa.retrievers.base import Hits
from hqa.retrievers.embedding.memo import VectorMemo
from hqa.schemas.trace import note_source_error

STOP_WORDS = {
    "the", "a", "an", "of", "in", "on", "is", "was", "who", "what", "which", "when", "where", "how", "did", "does",
    "do", "to", "and", "for", "by", "with", "from", "at", "as", "be", "are", "were", "that", "this", "it", "its",
    "many", "much", "first", "name", "has", "have", "had",
}


QID_MENTION = re.compile(r"\s*\[?'?(Q\d+)'?\]?\s*")  # a mention that is an id itself: "Q42", "['Q42']"
_POSSESSIVE = re.compile(r"([\w.])['’]s\b")
_GLUE = re.compile(r"(?<=\w)[.'’](?=\w|\s|$)")
_QUALIFIER = re.compile(r"\s*\(([^)]*)\)\s*$")
_ARTICLE = re.compile(r"^(the|a|an) ")
# question words that announce the type of the entity asked about → words of descriptions of that type
_CUES: dict[str, set[str]] = {
    "film": {"movie", "movies", "film", "films", "directed", "director", "directs", "producer", "produced", "starring",
             "actor", "actress", "cast", "played", "plays", "screenplay", "box", "sequel"},
    "novel": {"book", "books", "novel", "novels", "wrote", "written", "author", "published", "publisher", "trilogy",
              "narrator", "chapter"},
    "series": {"series", "tv", "show", "season", "seasons", "episode", "episodes", "broadcaster", "aired", "television"},
    "band": {"band", "singer", "album", "albums", "guitarist", "drummer", "vocalist", "song", "songs"},
    "song": {"song", "single", "vocal", "sang", "sung", "lyrics"},
    "club": {"club", "stadium", "team", "fc", "league", "coach", "manager"},
}
SIMILARITY_CANDIDATES = 6  # spot: descriptions compared with the question per call (benchmarks/bench_linking.py:
# accuracy@2 0.904 with 2, 3, 4, 6 or the earlier 32 in candidate order)
_CUE_ALIASES = {"film": {"film", "films", "movie"}, "novel": {"novel", "book", "books", "novella"},
                "series": {"series", "television", "tv"}, "band": {"band", "group"}, "song": {"song", "single"},
                "club": {"club", "team"}}


def mention_norm(text: str) -> str:
    """Normalisation for mention detection: like :func:`norm_label`, but a possessive "'s" is dropped and dots and
    apostrophes inside words are deleted ("Manchester City F.C.'s" → "manchester city fc")."""
    text = unicodedata.normalize("NFKC", text or "").lower()
    text = _GLUE.sub("", _POSSESSIVE.sub(r"\1", text))
    return _WS.sub(" ", _PUNCT.sub(" ", text)).strip()


def _is_name(key: str) -> bool:
    """Long enough to be a name: 2+ words, or 5+ letters and no stop word."""
    return len(key.split()) >= 2 or (len(key) >= 5 and key not in STOP_WORDS)


def label_aliases(label: str) -> list[tuple[str, float]]:
    """(alias, match quality) of a label: itself, without a "(…)" qualifier, without a leading article."""
    full = mention_norm(label)
    out: dict[str, float] = {full: 1.0} if full else {}
    bare = mention_norm(_QUALIFIER.sub("", label or ""))
    for alias in (bare, _ARTICLE.sub("", bare), _ARTICLE.sub("", full)):
        if alias and alias not in out and _is_name(alias):
            out[alias] = 0.95
    return list(out.items())


def alias_keys(label: str, aliases=()) -> dict[str, float]:
    """Every mention key of an entity with its match quality: :func:`label_aliases` of the label, then its Wikidata
    aliases (live linkers, dump-built worlds) at 0.95 when long enough to be a name.  The pack linker's index and a
    world's label store (:mod:`hqa.world.label_store`, read by :mod:`hqa.retrievers.linking.label_store`) are both
    built from it."""
    pairs = dict(label_aliases(label))
    for extra in aliases:
        key = mention_norm(extra)
        if key and _is_name(key):
            pairs.setdefault(key, 0.95)
    return pairs


def mention_grams(words: list[str], max_words: int):
    """The n-grams of ``words`` that may be mentions, longest first: ``(start, n, gram, content words)``; an n-gram
    needs a content word, must not end in a stop word, and a single word needs 3+ letters."""
    for n in range(min(max_words, len(words)), 0, -1):
        for i in range(0, len(words) - n + 1):
            gram_words = words[i: i + n]
            content = sum(1 for w in gram_words if w not in STOP_WORDS)
            if content == 0 or gram_words[-1] in STOP_WORDS or (n == 1 and len(gram_words[0]) < 3):
                continue
            yield i, n, " ".join(gram_words), content


def fuzzy_budget(gram: str) -> int | None:
    """The edit distance a mention n-gram may be from an alias to match fuzzily: ≤ 1 up to 8 characters, else ≤ 2;
    None when it is too short to match fuzzily (under 5 characters, or a single word under 6)."""
    if len(gram) < 5 or (" " not in gram and len(gram) < 6):
        return None
    return 1 if len(gram) <= 8 else 2


def id_order(eid: str) -> int:
    """An id's number (``Q42`` → 42; 0 without one), the tie-break of equal scores."""
    return int(eid[1:]) if eid[1:].isdigit() else 0


def title_keys(title: str) -> tuple[str, str]:
    """A Wikipedia page title's label keys: as written, then without a trailing disambiguation in parentheses
    ("Animal Farm (film)" → "Animal Farm")."""
    return norm_label(title), norm_label(re.sub(r"\s*\([^)]*\)\s*$", "", title or ""))


def disambiguation_text(label: str, description: str) -> str:
    """The text :func:`disambiguate` compares with the question: ``label: description``."""
    return f"{label}: {description}"


def entity_context(label: str, description: str) -> str:
    """What the spotter's context bonus reads of an entity: its description and the "(…)" qualifier of its label
    (``""``: it has neither, and takes no part)."""
    m = _QUALIFIER.search(label)
    return " ".join(x for x in (description, m.group(1) if m else "") if x)


def context_text(label: str, context: str) -> str:
    """The text the spotter's context bonus compares with the question: ``label: context``
    (:func:`entity_context`)."""
    return f"{label}: {context}"


def disambiguate(cands: list[Candidate], question: str | None, similarity: Callable | None) -> None:
    """DIVKNOWQA's disambiguation: 0.5 × the similarity of the question to each candidate's ``label: description``,
    added to its score in place (when there is a question and more than one candidate)."""
    if question and len(cands) > 1 and similarity is not None:
        for c, sim in zip(cands, similarity(question, [disambiguation_text(c.label, c.description) for c in cands])):
            c.score += 0.5 * float(sim)


@dataclass
class Candidate:
    id: str
    label: str
    description: str = ""
    score: float = 0.0
    mention: str = ""

    @classmethod
    def of(cls, e: dict, score: float, mention: str, qid: str | None = None) -> Candidate:
        """The candidate for entity record ``e`` (``{id, label, description}``; its id ``qid`` when given)."""
        return cls(qid or e["id"], e.get("label", ""), e.get("description", ""), score, mention)

    def to_dict(self) -> dict:
        return {"id": self.id, "label": self.label, "description": self.description, "score": round(self.score, 4),
                "mention": self.mention}


class GuardedLinker:
    """Any linker with its outages turned into observations (the one place they are: every program links through
    the toolbox's linker).  A linker that asks a service (the Wikibase API, a SPARQL store's labels) raises
    :class:`~hqa.errors.EndpointError` when the service is down or, in replay mode, the request was never recorded;
    here ``link`` / ``spot`` then answer an empty :class:`~hqa.retrievers.base.Hits` whose ``error`` says why,
    ``labels`` an empty dict, ``label`` / ``title_to_qid`` None, and the error goes into the running program's trace
    (``source_errors.linker``).  Everything else is the wrapped linker's (``entities``, ``similarity``, ...)."""

    def __init__(self, linker):
        self.inner = linker

    def __getattr__(self, name: str):
        if name == "inner":  # not set yet (a copy or unpickling in progress): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _call(self, method: str, empty, *args, **kwargs):
        try:
            return getattr(self.inner, method)(*args, **kwargs)
        except EndpointError as exc:
            error = f"entity linker unavailable: {exc}"[:500]
            note_source_error("linker", error)
            if isinstance(empty, list):
                return Hits(error=error)
            return empty

    def link(self, mention: str, question: str | None = None, k: int = 5) -> list[Candidate]:
        return self._call("link", [], mention, question, k=k)

    def spot(self, question: str, k: int = 5, mode: str = "default") -> list[Candidate]:
        return self._call("spot", [], question, k=k, mode=mode)

    def labels(self, ids: list[str]) -> dict[str, str]:
        return self._call("labels", {}, ids)

    def label(self, qid: str) -> str | None:
        return self._call("label", None, qid)

    def title_to_qid(self, title: str) -> str | None:
        return self._call("title_to_qid", None, title)


class EntityLinker:
    """Label index over ``(id, label, description)`` records.

    ``similarity(question, texts) -> list[float]`` is the disambiguation function (cosine of sentence embeddings by
    default, injected so tests can pass a deterministic one).
    """

    def __init__(self, entities: list[dict], similarity: Callable[[str, list[str]], list[float]] | None = None):
        self.entities = {e["id"]: e for e in entities if e.get("id")}
        self.similarity = similarity
        self.by_label: dict[str, list[str]] = {}
        self.by_alias: dict[str, list[tuple[str, float]]] = {}  # mention detection: alias → [(id, quality)]
        for e in self.entities.values():
            if not e["id"].startswith("Q"):
                continue
            if key := norm_label(e.get("label", "")):
                self.by_label.setdefault(key, []).append(e["id"])
            for alias, quality in alias_keys(e.get("label", ""), e.get("aliases") or ()).items():
                self.by_alias.setdefault(alias, []).append((e["id"], quality))
        self._labels = list(self.by_label)
        self._max_words = max((len(k.split()) for k in self._labels), default=1)
        # per first letter the aliases, for fuzzy lookup
        self._alias_by_initial: dict[str, list[str]] = {}
        for alias in self.by_alias:
            self._alias_by_initial.setdefault(alias[0], []).append(alias)
        self._max_alias_words = max((len(a.split()) for a in self.by_alias), default=1)

    def similarity_texts(self) -> list[str]:
        """Every text of an entity this linker may compare with a question (its ``label: description`` for
        :func:`disambiguate`, its ``label: context`` for the spotter's context bonus): the world's part of the texts
        :class:`hqa.retrievers.embedding.stored.StoredVectors` embeds once."""
        out: dict[str, None] = {}
        for e in self.entities.values():
            if not e["id"].startswith("Q"):
                continue
            label, description = e.get("label", ""), e.get("description", "")
            out[disambiguation_text(label, description)] = None
            if context := entity_context(label, description):
                out[context_text(label, context)] = None
        return list(out)

    # -- lookups ---------------------------------------------------------------------------------------------
    def label(self, qid: str) -> str | None:
        e = self.entities.get(qid)
        return e.get("label") or None if e else None

    def labels(self, ids: list[str]) -> dict[str, str]:
        return {i: self.entities[i]["label"] for i in ids if i in self.entities and self.entities[i].get("label")}

    def _candidates(self, mention: str, limit: int) -> list[tuple[str, float]]:
        key = norm_label(mention)
        if not key:
            return []
        if key in self.by_label:
            return [(qid, 1.0) for qid in self.by_label[key]]
        from rapidfuzz import fuzz, process

        found = process.extract(key, self._labels, scorer=fuzz.WRatio, limit=limit, score_cutoff=86)
        return [(qid, score / 100.0 * 0.9) for label, score, _ in found for qid in self.by_label[label]]

    def link(self, mention: str, question: str | None = None, k: int = 5) -> list[Candidate]:
        """Ranked candidates for a mention; ``question`` enables description-based disambiguation."""
        if m := QID_MENTION.fullmatch(mention or ""):
            return [Candidate.of(self.entities.get(m.group(1), {}), 1.0, mention, m.group(1))]
        scored = self._candidates(mention, limit=max(k * 2, 10))
        cands = [Candidate.of(self.entities[qid], s, mention, qid) for qid, s in scored]
        disambiguate(cands, question, self.similarity)
        cands.sort(key=lambda c: (-c.score, int(c.id[1:])))
        return cands[:k]

    def title_to_qid(self, title: str) -> str | None:
        """A Wikipedia page title → its QID by label (:func:`title_keys`); None when unknown or ambiguous."""
        for key in title_keys(title):
            ids = self.by_label.get(key, []) if key else []
            if len(ids) == 1:
                return ids[0]
        return None

    def spot(self, question: str, k: int = 5, mode: str = "default") -> list[Candidate]:
        """Entities mentioned in the question, best first (see the module docstring for the scoring);
        ``mode="exact"``: exact label n-grams, longest first (the earlier spotter)."""
        if k <= 0:
            return []
        if mode == "exact":
            return self._spot_exact(question, k)
        words = mention_norm(question).split()[:64]
        scored: list[tuple[float, int, int, Candidate]] = []
        for i, n, gram, content in mention_grams(words, self._max_alias_words):
            matches = self.by_alias.get(gram)
            if matches is None and n <= 6:
                matches = self._fuzzy(gram)
            for qid, quality in matches or ():
                e = self.entities[qid]
                score = quality * content + 0.15 * math.log1p(float(e.get("degree", 0) or 0))
                if not any(ch.isupper() for ch in e.get("label", "")):
                    score -= 0.8
                scored.append((score, i, i + n, Candidate.of(e, score, gram, qid)))
        if not scored:
            return []
        self._context_bonus(question, words, scored)
        scored.sort(key=lambda t: (-t[3].score, t[1], int(t[3].id[1:])))
        taken = [False] * len(words)
        found: list[Candidate] = []
        for _score, start, end, cand in scored:
            if any(taken[start:end]) or any(c.id == cand.id for c in found):
                continue
            taken[start:end] = [True] * (end - start)
            found.append(cand)
            if len(found) == k:
                break
        return found

    def _fuzzy(self, gram: str) -> list[tuple[str, float]]:
        """Aliases within a small edit distance of ``gram`` (same first letter; ≤ 1 edit up to 8 characters, else
        ≤ 2), at match quality 0.85; single words need 6+ characters."""
        budget = fuzzy_budget(gram)
        if budget is None:
            return []
        from rapidfuzz import process
        from rapidfuzz.distance import Levenshtein

        pool = self._alias_by_initial.get(gram[0], [])
        best = process.extractOne(gram, pool, scorer=Levenshtein.distance, score_cutoff=budget)
        if best is None or (" " not in gram and " " in best[0]):
            return []
        return [(qid, 0.85) for qid, _q in self.by_alias[best[0]]]

    def _context_bonus(self, question: str, words: list[str], scored: list) -> None:
        """Description similarity and type cues, added to the scores in place (only entities that have a
        description or a "(…)" qualifier in their label take part)."""
        qwords = set(words)
        cues = {t for t, triggers in _CUES.items() if qwords & triggers}
        contextual = []
        for _s, _a, _b, cand in scored:
            context = entity_context(cand.label, cand.description)
            if not context:
                continue
            cwords = set(mention_norm(context).split())
            if any(cwords & _CUE_ALIASES[t] for t in cues):
                cand.score += 0.3
            contextual.append((cand, context_text(cand.label, context)))
        if self.similarity is not None and contextual:
            # the best-scored candidates only: the bonus (at most 0.5) decides between near ties at the top, and a hop
            # over a large label store meets dozens of fuzzy candidates whose descriptions would all be embedded
            ranked = sorted(contextual, key=lambda x: -x[0].score)
            texts = list(dict.fromkeys(t for _c, t in ranked))[:SIMILARITY_CANDIDATES]
            sims = dict(zip(texts, self.similarity(question, texts)))
            for cand, text in contextual:
                cand.score += 0.5 * float(sims.get(text, 0.0))

    def _spot_exact(self, question: str, k: int) -> list[Candidate]:
        words = norm_label(question).split()
        taken = [False] * len(words)
        found: list[Candidate] = []
        for n in range(min(self._max_words, len(words)), 0, -1):
            for i in range(0, len(words) - n + 1):
                if any(taken[i: i + n]):
                    continue
                gram = " ".join(words[i: i + n])
                if n == 1 and (gram in STOP_WORDS or len(gram) < 3):
                    continue
                if gram in self.by_label:
                    taken[i:i + n] = [True] * n
                    found.extend(dataclasses.replace(c, mention=gram, score=float(n))  # longer mentions first
                                 for c in self.link(gram, question, k=1))
        found.sort(key=lambda c: -c.score)
        return found[:k]


def embedding_similarity(embedder: str | None = None, memo=None) -> Callable[[str, list[str]], list[float]]:
    """Cosine of the question's and each text's embedding.  Vectors go through ``memo`` (a
    :class:`~hqa.retrievers.embedding.memo.VectorMemo`; its own if None): an entity's "label: description" is embedded
    once while the memo holds it, and a toolbox's reranker finds the question there."""
    memo = memo if memo is not None else VectorMemo(embedder)

    def sim(question: str, texts: list[str]) -> list[float]:
        vecs = memo.vectors([question] + texts)
        return [float(v) for v in vecs[1:] @ vecs[0]]

    return sim


def load_pack_entities(pack_dir) -> list[dict]:
    """The pack's entities, each with ``degree`` = the number of pack facts it takes part in."""
    entities = read_jsonl(Path(pack_dir) / "entities.jsonl")
    facts = Path(pack_dir) / "facts.jsonl"
    degree = Counter(qid for fact in (read_jsonl(facts) if facts.exists() else [])
                     for term in (fact.get("s", ""), fact.get("o", ""))
                     if term.startswith("<") and (qid := W.local_id(term.strip("<>"))))
    for e in entities:
        e["degree"] = degree.get(e.get("id"), 0)
    return entities

"""Candidate answers drawn from the kept evidence, each with the line that supports it, ranked for the question.

A small LM cannot compose an answer from evidence, but it can pick one from a short list — if the list is short and
the right answer is near its top.  This module makes that list.

**Extraction.**  Every kept evidence item offers candidates with a *support* (the words around the candidate that
say how it relates to the question):

* KG items (``sparql`` rows and ``triples``): the object label with support ``subject relation`` and the subject
  label with support ``relation object`` (a one-hop row of an entity the question names makes its object the
  likely answer, a BM25 triple can hold the answer on either side); other SPARQL rows offer every value;
* passages: per sentence, the title-case name spans (initials such as "J. R. R." included, connecting particles
  "of / the / de / von …" allowed inside) and the dates, each with its sentence as support; a single capitalised
  demonym-shaped word right before a lowercase word ("an *American* crime drama") is a modifier, not a name, and is
  skipped; the passage title (without a trailing "(…)", up to a ", ", at most 8 words) is a candidate too.

ISO dates are shown as Wikidata's English labels show them ("13 July 1940"; January 1st as its year).  Candidates
that repeat the question (whole words) are dropped unless the question offers a choice (" or "), so are duplicates
(case-folded), fragments and ids.  A one-word name that begins or ends exactly one longer name ("Vance" and "Vivian
Vance") is that name: its supports join the longer name's.

**Ranking.**  A candidate's score is its best support's score plus candidate-level terms, a weighted sum of:

``sim``     cosine (MiniLM) between the question and the support (for KG facts the terms ``sim``, ``hyp``, ``ev``,
            ``rank`` have their own weights, ``kg_sim`` …: a fact's support is its relation, a passage's a sentence);
``hyp``     cosine between the support and the question with its wh-word replaced by the candidate
            ("Who directed Pulp Fiction?" + "Quentin Tarantino" → "Quentin Tarantino directed Pulp Fiction");
``ev``      the reranker's score of the evidence item; ``rank`` 1/(1 + its position);
``near``    in a sentence, 1/(1 + word distance) to the nearest *relation word* (a question content word that is
            not part of a linked entity's label or mention, compared by its first five letters);
``kg`` / ``title``  the candidate is a KG value / a passage title;
``kg_rel``  a word of the fact's relation (its label, or an alias of a well-known Wikidata property) is a relation
            word of the question ("directed" ~ "director", "cast" ~ "cast member");
``sup``     log(1 + number of evidence items offering the candidate);
``type``    −1 when the candidate does not fit the expected answer type (a date for "when", a number for "how many",
            not a date, number or lowercase concept for "who");
``lower``   −1 for an all-lowercase candidate; ``overlap`` −(share of the candidate's content words in the question).

:func:`candidate_features` computes the terms once and :func:`score_candidates` weighs them, so fitting re-scores
the same terms under many weights.  The weights (:data:`WEIGHTS`) were fitted by coordinate ascent on
``compmix/train:answerable`` only (``python benchmarks/tune_candidates.py`` reproduces them) and are checked on dev
and test sets it never saw.
Without an embedding function the two cosine terms are 0 and the ranking is lexical.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hqa.retrievers.base import Evidence
from hqa.answering.selective import fits  # the answer shapes (date, number, who) the ranking and the answer types share

Embed = Callable[[Sequence[str]], np.ndarray]

#: fitted on compmix/train:answerable (benchmarks/tune_candidates.py); see the module docstring for each term
WEIGHTS: dict[str, float] = {"sim": 4.0, "hyp": 0.25, "ev": 4.0, "rank": 1.0, "near": 2.0, "title": 0.25,
                             "kg": -0.5, "kg_sim": 2.0, "kg_hyp": 0.25, "kg_ev": 4.0, "kg_rank": 1.0, "kg_rel": 1.0,
                             "sup": 0.25, "type": 2.0, "lower": 0.0, "overlap": 2.0}

_QUALIFIER = re.compile(r"\s*\([^)]*\)\s*$")
_QID_SUFFIX = re.compile(r"\s*\((?:Q|P)\d+\)\s*$")
_ROW_PART = re.compile(r"(\w+)=(.*?)(?=, \w+=|$)")
_INITIALS = r"(?:[A-Z]\.\s?)+"
_TOKEN = r"[A-Z](?:[\w'’&-]|\.(?=\w))*"  # a capitalised word; inner dots only ("F.C")
_PARTICLE = r"(?:of|the|de|del|la|le|von|van|da|du)"
_NAME = re.compile(rf"\b(?:{_INITIALS})?{_TOKEN}(?:\s+(?:{_PARTICLE}\s+)*(?:{_INITIALS})?{_TOKEN})*")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_MONTH = f"(?:{'|'.join(_MONTHS)})"
_DATE = re.compile(rf"\b(?:\d{{1,2}} {_MONTH} \d{{3,4}}|{_MONTH} \d{{1,2}}, \d{{3,4}}|{_MONTH} \d{{3,4}}|\d{{4}}-\d\d-\d\d"
                   r"|1\d{3}|20\d\d)\b")
_SENTENCE = re.compile(r"(?<!\b[A-Z]\.)(?<=[.!?])\s+(?=[A-Z])")  # not after an initial ("J. R. R. Tolkien")
_DEMONYM = re.compile(r"^[A-Z][a-z]+(?:an|ish|ese|ian|ch|i)$")
_PUNCT = re.compile(r"[^\w\s]")
_WORDS = re.compile(r"[a-z0-9]+")
_WH = re.compile(r"^\s*(?:who|whom|what|which|where|when)\b", re.I)
_SENTENCE_WORDS = set("the a an it he she they his her its their this that these in on at as after before during when "
                      "while there who what which page summary is was yes no also born however following since from "
                      "with for by".split())
_STOP = set("the a an of in on at to for by with and or is was are were be been who whom whose what which when where "
            "how many much did does do has have had from as that this it its his her their name".split())

_ISO = re.compile(r"^(-?\d{4})-(\d\d)-(\d\d)(?:T[\d:]+(?:Z|[+-]\d\d:\d\d)?)?$")
_WHEN = re.compile(r"^\s*(?:when\b|(?:in |on )?(?:what|which) (?:year|date|day|month|century)\b)|\byear\b", re.I)
_HOW_MANY = re.compile(r"\bhow (?:many|much)\b|\bnumber of\b", re.I)
_WHO = re.compile(r"^\s*(?:who|whom|whose)\b", re.I)

__all__ = ["AnswerCandidate", "CandidateFeatures", "WEIGHTS", "rank_candidates", "candidate_features",
           "score_candidates", "answer_type", "show_value", "fold"]


@dataclass
class AnswerCandidate:
    """One candidate answer: its text, score, the support line that scored best and the source it came from."""

    text: str
    score: float
    support: str
    source: str
    features: dict[str, float] = field(default_factory=dict)
    qids: list[str] = field(default_factory=list)  # the KG entities the candidate names in its facts
    relations: list[tuple[str, str]] = field(default_factory=list)  # (property id, "object" / "subject") of them
    kinds: list[str] | None = None  # its answer types when already known (hqa.answering.selective.candidate_types)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "score": round(self.score, 4), "support": self.support, "source": self.source}


def show_value(value: str) -> str:
    """An ISO date as Wikidata's English label shows it ("1940-07-13" → "13 July 1940"; "1969-01-01" → "1969");
    anything else unchanged."""
    m = _ISO.match(value.strip())
    if not m or not 1 <= int(m.group(2)) <= 12:
        return value
    year, month, day = m.group(1), int(m.group(2)), int(m.group(3))
    return year if month == day == 1 else f"{day} {_MONTHS[month - 1]} {year}"


def answer_type(question: str) -> str:
    """``date``, ``number``, ``who`` or ``any`` — the kind of answer the question asks for (the first that matches)."""
    kinds = ((_HOW_MANY, "number"), (_WHEN, "date"), (_WHO, "who"))
    return next((kind for pattern, kind in kinds if pattern.search(question or "")), "any")


def fold(text: str) -> str:
    """Lower case, punctuation as spaces, whitespace folded: the form candidates are compared in."""
    return " ".join(_PUNCT.sub(" ", (text or "").lower()).split())


def _words(text: str) -> list[str]:
    return _WORDS.findall((text or "").lower())


def _stem(word: str) -> str:
    return word[:5]


def hypothesis(question: str, candidate: str) -> str:
    """The question as a statement with the candidate in place of its wh-word (else "question: candidate")."""
    q = question.strip().rstrip(" ?")
    return _WH.sub(candidate, q, count=1) if _WH.match(q) else f"{q}: {candidate}"


@functools.lru_cache(maxsize=1)
def _property_names() -> dict[str, list[str]]:
    """Property id → label and aliases of the well-known Wikidata properties (hqa.data.wikidata)."""
    from hqa.data.wikidata import WELL_KNOWN_PROPERTIES

    return {p["id"]: [p["label"], *p.get("aliases", [])] for p in WELL_KNOWN_PROPERTIES}


def relation_names(pid: str, label: str) -> list[str]:
    """How a KG relation may be asked for: its label and, for well-known properties, their aliases."""
    return ([label] if label else []) + _property_names().get(pid, [])


@dataclass
class _Offer:
    text: str
    support: str  # what scoring compares with the question: a sentence, or a fact without the candidate
    kind: str  # "kg", "text", "title"
    rank: int
    evidence: Evidence
    shown: str = ""  # what the LM is shown as its evidence (the whole fact); empty = ``support``
    relation: tuple[str, ...] = ()  # KG: the names of the fact's relation
    qid: str = ""  # KG: the entity the candidate is in the fact (empty for a literal)
    role: tuple[str, str] | None = None  # KG: (property id, "object" / "subject")


def _entity_id(value: Any) -> str:
    """``Q42`` of ``<http://www.wikidata.org/entity/Q42>`` or ``Q42``; empty for a literal."""
    local = str(value or "").strip("<>").rsplit("/", 1)[-1]
    return local if re.fullmatch(r"Q\d+", local) else ""


def _offers(ev: Evidence, rank: int) -> list[_Offer]:
    meta = ev.meta or {}
    if ev.source in ("sparql", "triples"):
        s, o = meta.get("s_label"), meta.get("o_label")
        p = meta.get("p_label") or ""
        if not p and s and o:  # a one-hop row renders "subject relation object"
            p = ev.text.replace(str(s), "", 1).replace(str(o), "", 1).strip()
        out = []
        fact = f"{s or ''} {p} {show_value(str(o or ''))}".strip() if (s or o) else ev.text
        pid = str(meta.get("p") or "").strip("<>").rsplit("/", 1)[-1]
        names = tuple(relation_names(pid, p))
        if o:
            out.append(_Offer(str(o), f"{s or ''} {p}".strip(), "kg", rank, ev, fact, names,
                              _entity_id(meta.get("o")), (pid, "object") if pid else None))
        if s and ev.source == "triples":
            out.append(_Offer(str(s), f"{p} {o or ''}".strip(), "kg", rank, ev, fact, names,
                              _entity_id(meta.get("s")), (pid, "subject") if pid else None))
        if not out and ev.source == "sparql":  # a row of an LM's own query: every value
            out = [_Offer(_QID_SUFFIX.sub("", v).strip(), ev.text, "kg", rank, ev)
                   for _var, v in _ROW_PART.findall(ev.text or "")]
        return out
    if ev.source != "text":
        return []
    out = []
    for sentence in _SENTENCE.split(ev.text or ""):
        dates = [m.span() for m in _DATE.finditer(sentence)]
        for m in _NAME.finditer(sentence):
            if any(m.start() < end and start < m.end() for start, end in dates):
                continue  # the month of a date
            span = re.sub(r"['’]s?$", "", m.group(0).rstrip(".")).strip()  # "Orwell's" → "Orwell"
            if fold(span) in _SENTENCE_WORDS:
                continue
            after = sentence[m.end():m.end() + 40].split()
            if _DEMONYM.match(span) and after and after[0][:1].islower():
                continue  # "an American crime drama": a modifier
            out.append(_Offer(span, sentence, "text", rank, ev))
        out.extend(_Offer(m.group(0), sentence, "text", rank, ev) for m in _DATE.finditer(sentence))
    # a title is its name: without a "(…)" qualifier, and up to a ", " (table rows are titled "Name, first words…")
    title = _QUALIFIER.sub("", str(meta.get("title") or "")).split(", ")[0].strip()
    if title and len(title.split()) <= 8:
        out.append(_Offer(title, (ev.text or "")[:200], "title", rank, ev))
    return out


def _usable(cand: str) -> bool:
    return bool(fold(cand)) and len(cand) <= 80 and "\\" not in cand and not re.fullmatch(r"[QP]\d+", cand) and \
        (len(cand) >= 3 or cand.isdigit())


def _merge_partial_names(pool: dict[str, list[_Offer]], shown: dict[str, str]) -> None:
    """A one-word name that begins or ends exactly one longer name of the pool ("Vance" / "Vivian Vance") is that
    name: its offers join the longer name's."""
    for key in list(pool):
        text = shown[key]
        if " " in key or not text[:1].isupper():
            continue
        longer = [k for k in pool if k != key and (k.startswith(key + " ") or k.endswith(" " + key))]
        if len(longer) == 1:
            pool[longer[0]].extend(pool.pop(key))
            del shown[key]


@dataclass
class CandidateFeatures:
    """A candidate before scoring: its offers, each with its support-level terms, and its candidate-level terms."""

    text: str
    offers: list[tuple[_Offer, dict[str, float]]]
    terms: dict[str, float]

    def best(self, w: dict[str, float]) -> tuple[float, _Offer, dict[str, float]]:
        """The score under weights ``w`` and the offer (with its terms) that gives it."""
        score, offer, f = max(((_weigh(w, f), o, f) for o, f in self.offers), key=lambda t: t[0])
        return score + _weigh(w, self.terms), offer, f


def _weigh(w: dict[str, float], terms: dict[str, float]) -> float:
    return sum(w.get(name, 0.0) * value for name, value in terms.items())


def candidate_features(question: str, evidence: Sequence[Evidence | dict], *, entities: Sequence[Any] = (),
                       embed: Embed | None = None) -> list[CandidateFeatures]:
    """Every candidate of ``evidence`` with the terms :func:`rank_candidates` weighs (see the module docstring)."""
    items = [e if isinstance(e, Evidence) else Evidence(**e) for e in evidence]
    q_fold = f" {fold(question)} "
    choice = " or " in q_fold
    pool: dict[str, list[_Offer]] = {}
    shown: dict[str, str] = {}
    for rank, ev in enumerate(items):
        for offer in _offers(ev, rank):
            text = show_value(" ".join(offer.text.split()))
            key = fold(text)
            if not _usable(text) or (not choice and f" {key} " in q_fold):
                continue
            offer.text = text
            pool.setdefault(key, []).append(offer)
            shown.setdefault(key, text)
    if not pool:
        return []
    _merge_partial_names(pool, shown)

    q_words = {x for x in _words(question) if x not in _STOP}
    entity_words: set[str] = set()
    for ent in entities:
        get = ent.get if isinstance(ent, dict) else (lambda k, _e=ent: getattr(_e, k, ""))
        entity_words.update(_words(f"{get('label') or ''} {get('mention') or ''}"))
    relation = {_stem(x) for x in q_words - entity_words}

    cos_support: dict[str, float] = {}
    cos_hyp: dict[str, float] = {}
    if embed is not None:
        supports = sorted({o.support for offers in pool.values() for o in offers})
        hyps = {key: hypothesis(question, shown[key]) for key in pool}
        vecs = np.asarray(embed([question] + supports + list(hyps.values())), dtype=np.float32)
        qv, sv, hv = vecs[0], vecs[1:1 + len(supports)], vecs[1 + len(supports):]
        by_support = dict(zip(supports, sv))
        cos_support = {s: float(v @ qv) for s, v in by_support.items()}
        hyp_vec = dict(zip(hyps, hv))
        cos_hyp = {f"{key}\x1f{s}": float(hyp_vec[key] @ by_support[s])
                   for key, offers in pool.items() for s in {o.support for o in offers}}

    kind = answer_type(question)
    out: list[CandidateFeatures] = []
    for key, offers in pool.items():
        text = shown[key]
        scored = []
        for o in offers:
            f = {"sim": cos_support.get(o.support, 0.0), "hyp": cos_hyp.get(f"{key}\x1f{o.support}", 0.0),
                 "ev": float(o.evidence.score or 0.0), "rank": 1.0 / (1 + o.rank),
                 "kg": float(o.kind == "kg"), "title": float(o.kind == "title"), "near": 0.0}
            if o.kind == "text" and relation:
                words = _words(o.support)
                at_relation = [i for i, x in enumerate(words) if _stem(x) in relation]
                first = (_words(o.text) or [""])[0]
                at_cand = [i for i, x in enumerate(words) if x == first]
                if at_relation and at_cand:
                    f["near"] = 1.0 / (1 + min(abs(a - b) for a in at_relation for b in at_cand))
            if o.kind == "kg":  # KG facts and passages are weighed apart: a fact's support is its relation
                f = {("kg_" + k if k in ("sim", "hyp", "ev", "rank") else k): v for k, v in f.items()}
                f["kg_rel"] = float(any(_stem(x) in relation for name in o.relation for x in _words(name)))
            scored.append((o, f))
        content = {x for x in _words(text) if x not in _STOP}
        g = {"sup": math.log1p(len({id(o.evidence) for o in offers})), "type": -float(not fits(text, kind)),
             "lower": -float(text == text.lower()),
             "overlap": -(len(content & q_words) / len(content)) if content else 0.0}
        out.append(CandidateFeatures(text, scored, g))
    return out


def score_candidates(features: Sequence[CandidateFeatures], weights: dict[str, float] | None = None,
                     max_candidates: int = 8) -> list[AnswerCandidate]:
    """``features`` scored with ``weights`` (default :data:`WEIGHTS`), best first."""
    w = WEIGHTS if weights is None else weights
    ranked = []
    for c in features:
        score, offer, f = c.best(w)
        ranked.append(AnswerCandidate(c.text, score, offer.shown or offer.support, offer.evidence.source,
                                      {**f, **c.terms}, list(dict.fromkeys(o.qid for o, _ in c.offers if o.qid)),
                                      list(dict.fromkeys(o.role for o, _ in c.offers if o.role))))
    ranked.sort(key=lambda c: -c.score)
    return ranked[:max_candidates]


def rank_candidates(question: str, evidence: Sequence[Evidence | dict], *, entities: Sequence[Any] = (),
                    embed: Embed | None = None, max_candidates: int = 8,
                    weights: dict[str, float] | None = None) -> list[AnswerCandidate]:
    """Candidates from ``evidence`` (in the order the reranker kept it), best first; see the module docstring.

    ``entities`` are the linked question entities (``Candidate`` objects or dicts with ``label``/``mention``): their
    words are not relation words.  ``embed`` maps texts to L2-normalised vectors (e.g. MiniLM)."""
    feats = candidate_features(question, evidence, entities=entities, embed=embed)
    return score_candidates(feats, weights, max_candidates)

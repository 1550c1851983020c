"""Selective answering: the grounded default answers only when its evidence supports an answer of the kind the
question asks for, and otherwise abstains.

This is hqa's own addition (issue 31), not a method of the papers hqa reproduces; it is on for the embedded LM
(``programs.abstain = auto``) and off for remote LMs, which keep free answers.

* **Expected answer type** (:func:`expected_type`): ``person``, ``place``, ``organisation``, ``work``, ``date``,
  ``number`` or ``other``, from the question's wh-word and the noun after "which / what" ("which city" → place).
* **Candidate type** (:func:`candidate_types`): dates and numbers by their shape; entities by their KG types — the
  classes the world's KG gives them (``wdt:P31``, and one ``wdt:P279`` step up), properties that only one kind of
  thing has (a date of birth: a person), and the relation of the fact the candidate came from (the object of
  "director" is a person, its subject a work).  The class and property tables are Wikidata's ids
  (``hqa/data/answer_types.json``, labels from Wikidata).  When those say nothing, the head noun of the entity's
  short description (the pack's recorded descriptions and the Wikipedia leads' short descriptions: "1968 film by
  Stanley Kubrick" → work); a candidate the world says nothing about has no type.
* **Type fit**: +1 the candidate is of an expected kind, −1 it is of another kind only, 0 unknown.  A top
  candidate that does not fit (−1) is never given as the answer.
* **Confidence** (:func:`confidence`): a logistic model over the best candidate's ranking score, its margin over
  the second, the type fit and a few evidence terms (:data:`FEATURES`), fitted with its threshold on training
  questions only — ``compmix/train``, answerable and not answerable ones — by ``python
  benchmarks/calibrate_abstain.py``, which writes ``hqa/data/abstain.json`` (read here by :func:`calibration`).
* **Risk-coverage** (:mod:`hqa.reports.selective`): over evaluation rows, precision of the answered questions and
  coverage at the shipped threshold, and the curve over every threshold.  An abstention is never a correct answer
  for accuracy.  How an abstention is shown is :mod:`hqa.answering.presentation`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = ["TYPES", "FEATURES", "LEARNED_FEATURES", "expected_type", "candidate_types", "description_type", "type_fit",
           "confidence_features", "confidence", "calibration", "resolve_abstain", "Decision", "decide"]

TYPES = ("person", "place", "organisation", "work", "date", "number", "other")
ENTITY_TYPES = ("person", "place", "organisation", "work")

#: the inputs of the confidence model, in the order of the weights in abstain.json
FEATURES = ("score", "margin", "fit", "mismatch", "kg", "kg_rel", "near", "sim", "sup", "n_candidates")
#: the best candidate's terms the learned ranker's confidence reads as well (0 when a candidate has none): the
#: hand-set score, the entity link's score, how many kept items mention it, how many kinds of evidence offer it
LEARNED_FEATURES = ("hand", "link", "mentions", "n_kinds", "ce")

_NUMBER_Q = re.compile(r"\bhow (?:many|much|tall|long|old|high|far|big|large|deep|heavy)\b|\bnumber of\b"
                       r"|\b(?:population|percentage|height|length|area|age) of\b", re.I)
_DATE_Q = re.compile(r"^\s*(?:since |until )?when\b|\b(?:what|which) (?:year|date|day|month|decade|century)\b"
                     r"|\bin what year\b|\byear\b.*\?$", re.I)
_WHO_Q = re.compile(r"\b(?:who|whom)\b", re.I)
_WHERE_Q = re.compile(r"^\s*(?:where|from where)\b|\bwhere (?:was|is|did|does|do|were|are)\b", re.I)
_HEAD_Q = re.compile(r"\b(?:which|what)\s+(?:(?:is|was|are|were)\s+(?:the\s+|an?\s+)?)?((?:[a-z'-]+\s+){0,2}[a-z'-]+)",
                     re.I)
#: head nouns after "which / what" and the type they ask for (the longest match of their words wins)
_HEADS: dict[str, str] = {word: kind for kind, words in {
    "person": "person people man woman actor actress director author writer novelist poet singer songwriter "
              "musician composer player footballer athlete president king queen prince princess emperor politician "
              "artist painter scientist character wife husband spouse son daughter father mother brother sister "
              "child children founder producer coach manager leader member players star host creator inventor "
              "architect philosopher",
    "place": "city country state town village place location continent island river lake mountain region county "
             "province capital nation birthplace island ocean sea stadium venue area district territory",
    "organisation": "team club company band group organisation organization university college school league party "
                    "label network studio franchise firm corporation brand institution",
    "work": "film movie book novel album song single series show programme program game play episode opera painting "
            "poem work sequel",
    "date": "year date day month decade century",
    "number": "number amount",
}.items() for word in words.split()}


def expected_type(question: str) -> str:
    """The kind of answer ``question`` asks for: one of :data:`TYPES`."""
    q = (question or "").strip()
    if _NUMBER_Q.search(q):
        return "number"
    m = _HEAD_Q.search(q)
    if m:
        for word in m.group(1).lower().split():  # "which football club", "what is the capital of": the first head
            kind = _HEADS.get(word) or _HEADS.get(word.rstrip("s"))
            if kind:
                return kind
    if _DATE_Q.search(q):
        return "date"
    if _WHO_Q.search(q):
        return "person"
    if _WHERE_Q.search(q):
        return "place"
    return "other"


@lru_cache(maxsize=1)
def _tables() -> dict[str, Any]:
    return json.loads(resources.files("hqa.data").joinpath("answer_types.json").read_text(encoding="utf-8"))


def _by_id(section: str) -> dict[str, str]:
    return {pid: kind for kind, ids in _tables()[section].items() for pid in ids}


_IS_DATE = re.compile(r"^(?:\d{1,2} [A-Z][a-z]+ -?\d{3,4}|[A-Z][a-z]+ (?:\d{1,2}, )?\d{3,4}|-?\d{3,4})$")
_IS_NUMBER = re.compile(r"^[+-]?\d[\d,]*(?:\.\d+)?$")


def fits(cand: str, kind: str) -> bool:
    """Whether an answer candidate has the shape ``kind`` (``date``, ``number``, ``who``; anything else fits): the
    shapes the candidate ranking (:mod:`hqa.answering.candidates`) and :func:`shape_type` share (a year is a date)."""
    if kind == "date":
        return bool(_IS_DATE.match(cand))
    if kind == "number":
        return bool(_IS_NUMBER.match(cand))
    if kind == "who":
        return not (_IS_DATE.match(cand) or _IS_NUMBER.match(cand) or cand == cand.lower())
    return True


def shape_type(text: str) -> str | None:
    """``date`` or ``number`` when ``text`` has that shape, else None."""
    t = (text or "").strip()
    if fits(t, "number") and not re.fullmatch(r"1\d{3}|20\d\d", t):
        return "number"
    return "date" if fits(t, "date") else None


def kg_types(ids: Iterable[str], sparql: Any) -> dict[str, set[str]]:
    """The kinds (:data:`ENTITY_TYPES`, ``other``) the world's KG gives each QID of ``ids``: from its classes
    (``wdt:P31``, one ``wdt:P279`` step up) and from properties only one kind of thing has.  Empty when the KG
    cannot say (no store, an error, an outage)."""
    ids = [i for i in dict.fromkeys(ids) if re.fullmatch(r"Q\d+", i or "")]
    out: dict[str, set[str]] = {i: set() for i in ids}
    if not ids or sparql is None or not hasattr(sparql, "run"):
        return out
    classes, indicators = _by_id("classes"), _by_id("subject_properties")
    from hqa.retrievers.sparql.guard import TYPES  # a shape the store runs without parsing it first

    query = TYPES.format(values=" ".join(f"wd:{i}" for i in ids), props=" ".join(f"wdt:{p}" for p in indicators))
    try:
        res = sparql.run(query)
    except Exception:  # noqa: BLE001 - an outage is no type, never a crash
        return out
    if getattr(res, "error", None):
        return out
    for row in getattr(res, "rows", []) or []:
        x = _local(row.get("x"))
        if x in out:
            out[x].update(kind for key, table in (("c", classes), ("d", classes), ("p", indicators))
                          if (kind := table.get(_local(row.get(key)))))
    return out


def _local(value: Any) -> str:
    return str(value or "").strip("<>").rsplit("/", 1)[-1]


def relation_types(pid: str, role: str) -> set[str]:
    """The kind of the ``role`` (``object`` / ``subject``) of a fact with property ``pid`` (Wikidata's range /
    domain of the property, as :file:`answer_types.json` lists them); empty when the property does not say."""
    table = _tables()["object_properties" if role == "object" else "subject_properties"]
    return {kind for kind, ids in table.items() if pid in ids}


_DESC_STOP = frozenset("of by in from for at on with who that which and or to as".split())


def description_type(description: str) -> str | None:
    """The kind a short description names (Wikidata's / Wikipedia's "1968 film by Stanley Kubrick", "capital of
    France", "American rock band"): the last head noun (:data:`_HEADS`) before the first preposition, else None."""
    head = None
    for word in re.findall(r"[a-z'-]+", (description or "").lower()):
        if word in _DESC_STOP:
            break
        kind = _HEADS.get(word) or _HEADS.get(word.rstrip("s"))
        if kind in ENTITY_TYPES:
            head = kind
    return head


def linker_descriptions(candidate: Any, linker: Any) -> list[str]:
    """The descriptions ``linker`` (a pack / world label index with ``entities`` and ``by_label``) holds for the
    candidate's QIDs, or else for the entities labelled with the candidate's text; empty when it has none."""
    entities = getattr(linker, "entities", None)
    if not isinstance(entities, dict) or not entities:
        return []
    qids = list(getattr(candidate, "qids", ()) or ())
    if not qids:
        from hqa.retrievers.linking.entities import norm_label

        by_label = getattr(linker, "by_label", None)
        qids = list((by_label or {}).get(norm_label(candidate.text), ()))[:3] if isinstance(by_label, dict) else []
    return [str((entities.get(q) or {}).get("description") or "") for q in qids]


def candidate_types(candidate: Any, sparql: Any = None, known: dict[str, set[str]] | None = None,
                    linker: Any = None) -> set[str]:
    """The kinds ``candidate`` (an :class:`hqa.answering.candidates.AnswerCandidate`) is: its shape, the relations
    of the facts it came from, and its KG types (``known``, from :func:`kg_types`, or asked of ``sparql``); when
    those say nothing, the kind its short description names (:func:`description_type`; descriptions from the
    ``linker``'s entities — recorded ones and the Wikipedia leads' short descriptions in the pack).  A candidate
    whose ``kinds`` were already found (the learned ranker finds every candidate's) keeps them."""
    if getattr(candidate, "kinds", None) is not None:
        return set(candidate.kinds)
    if shape := shape_type(candidate.text):
        return {shape}
    kinds: set[str] = set()
    for pid, role in getattr(candidate, "relations", ()) or ():
        kinds |= relation_types(pid, role)
    qids = list(getattr(candidate, "qids", ()) or ())
    if qids:
        found = known if known is not None else kg_types(qids, sparql)
        for q in qids:
            kinds |= found.get(q, set())
    if not kinds and linker is not None:
        kinds = {k for k in map(description_type, linker_descriptions(candidate, linker)) if k}
    return kinds


#: what each expected type accepts (a "who" question may be answered by a band or a team)
_ACCEPTS = {"person": {"person", "organisation"}, "place": {"place"}, "organisation": {"organisation"},
            "work": {"work"}, "date": {"date"}, "number": {"number"}}


def type_fit(expected: str, kinds: set[str]) -> int:
    """+1 ``kinds`` holds a kind ``expected`` accepts, −1 they are known and none is, 0 unknown (or ``other``)."""
    accepts = _ACCEPTS.get(expected)
    if accepts is None:
        return 0
    if kinds & accepts:
        return 1
    if expected in ("date", "number"):
        return -1  # a date or a number is known by its shape
    return -1 if kinds else 0


def confidence_features(candidates: Sequence[Any], fit: int) -> dict[str, float]:
    """The inputs of the confidence model (:data:`FEATURES`) for the best of ``candidates`` (ranked, best first)."""
    top = candidates[0]
    f = top.features or {}
    second = candidates[1].score if len(candidates) > 1 else top.score - 4.0
    return {"score": float(top.score), "margin": float(top.score - second), "fit": float(fit == 1),
            "mismatch": float(fit == -1), "kg": float(top.source in ("sparql", "triples")),
            "kg_rel": float(f.get("kg_rel", 0.0)), "near": float(f.get("near", 0.0)),
            "sim": float(f.get("sim", 0.0) or f.get("kg_sim", 0.0)), "sup": float(f.get("sup", 0.0)),
            "n_candidates": math.log1p(len(candidates)),
            # the learned ranker's confidence reads these too (hqa.answering.ranker keeps them in the features)
            **{name: _finite(f.get(name)) for name in LEARNED_FEATURES}}


def _finite(value: Any) -> float:
    value = float(value or 0.0)
    return value if math.isfinite(value) else 0.0


@lru_cache(maxsize=1)
def calibration() -> dict[str, Any]:
    """The fitted confidence model and threshold (``hqa/data/abstain.json``, written by
    ``benchmarks/calibrate_abstain.py``)."""
    return json.loads(resources.files("hqa.data").joinpath("abstain.json").read_text(encoding="utf-8"))


def confidence(features: dict[str, float], model: dict[str, Any] | None = None) -> float:
    """P(the best candidate is right) under the logistic ``model`` (default :func:`calibration`)."""
    model = model or calibration()
    z = float(model["bias"])
    for name, w, mean, std in zip(model["features"], model["weights"], model["mean"], model["std"]):
        z += float(w) * (float(features.get(name, 0.0)) - float(mean)) / (float(std) or 1.0)
    return 1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0)))


def resolve_abstain(mode: str | None, settings: Any) -> bool:
    """Whether to answer selectively: an explicit ``on`` / ``off`` wins, else ``programs.abstain``; ``auto`` is on
    for the embedded LM (provider ``local``) only, as ``programs.answer_mode``."""
    mode = mode or getattr(getattr(settings, "programs", None), "abstain", "auto") or "auto"
    if mode not in ("auto", "on", "off"):
        raise ValueError(f"abstain must be one of auto, on, off, not {mode!r}")
    if mode == "auto":
        return settings.lm.provider == "local"
    return mode == "on"


@dataclass
class Decision:
    """Answer or abstain, with the confidence, the expected type and the best candidate's kinds."""

    abstained: bool
    reason: str | None
    confidence: float | None
    expected: str
    kinds: list[str] = field(default_factory=list)
    fit: int = 0
    best: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"abstained": self.abstained, "reason": self.reason, "best": self.best,
                "confidence": None if self.confidence is None else round(self.confidence, 4),
                "expected_type": self.expected, "candidate_types": self.kinds, "type_fit": self.fit}


def decide(question: str, candidates: Sequence[Any], sparql: Any = None, model: dict[str, Any] | None = None,
           world: str = "the world", linker: Any = None) -> Decision:
    """Whether to give the best of ``candidates`` (ranked, best first) as the answer to ``question``: not when
    there is none, when it is not of the kind the question asks for, or when its confidence is below the
    calibrated threshold.  ``linker``: the label index whose descriptions type a candidate the KG does not."""
    expected = expected_type(question)
    if not candidates:
        return Decision(True, f"no candidate answer in the evidence of {world}", None, expected)
    model = model or calibration()
    best = candidates[0].text
    kinds = candidate_types(candidates[0], sparql, linker=linker)
    fit = type_fit(expected, kinds)
    conf = confidence(confidence_features(candidates, fit), model)
    kinds_l = sorted(kinds)
    if fit < 0:
        what = " or ".join(kinds_l) or "something else"
        return Decision(True, f"the question asks for a {expected}; the best candidate {best!r} is a {what}", conf,
                        expected, kinds_l, fit, best)
    if conf < (threshold := float(model["threshold"])):  # the threshold of abstain.json
        return Decision(True, f"confidence {conf:.2f} is below the calibrated threshold {threshold:.2f}", conf,
                        expected, kinds_l, fit, best)
    return Decision(False, None, conf, expected, kinds_l, fit, best)

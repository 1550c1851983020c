"""The learned answer ranker: the candidates of :mod:`hqa.answering.candidates` re-ranked by a LightGBM
lambdarank model trained on ``compmix/train`` (``hqa train ranker``, :mod:`hqa.optimize.answer_ranker`), with the
confidence of its best candidate calibrated on ``compmix/dev`` and the abstention threshold chosen there.

This is hqa's own addition (issue 57), not a paper's method.  The hand-set ranking (:data:`~hqa.answering.candidates.WEIGHTS`
and the logistic confidence of ``hqa/data/abstain.json``) stays as the ``hand`` option, an ablation.

**Features** (:data:`FEATURES`, one row per candidate; what the trace already has or gets cheaply):

* the hand-set ranking: its score, its gap to the question's best and the candidate's position (``hand``,
  ``hand_gap``, ``hand_pos``);
* per support kind, the best of each term :func:`~hqa.answering.candidates.candidate_features` computes over the
  candidate's offers — MiniLM similarity of question and support (``sim`` / ``kg_sim``), of the support and the
  question turned into a statement (``hyp`` / ``kg_hyp``), the reranker's score (``ev`` / ``kg_ev``) and its gap
  to the best evidence item (``ev_gap``), the evidence position (``rank`` / ``kg_rank``), nearness to a relation
  word (``near``) and the fact's relation named by the question (``kg_rel``); missing (NaN) when the candidate has
  no offer of that kind;
* where it came from and how often: offered by a KG fact, a passage sentence, a passage title, a one-hop SPARQL
  row, a BM25 triple (``kg``, ``text``, ``title``, ``sparql``, ``triples``), how many of those kinds agree
  (``n_kinds``), how many evidence items offer it (``sup``, ``n_offers``) and how many kept items mention it
  (``mentions``);
* its shape and words: the expected answer shape (``type``), all lowercase (``lower``), words shared with the
  question (``overlap``), its length (``words``);
* its kind against the question's form: the expected type (``q_type``, the index in
  :data:`hqa.answering.selective.TYPES`), the candidate's kinds (``is_person`` … ``is_number``) and their fit
  (``fit``: +1 / 0 / −1, :func:`~hqa.answering.selective.type_fit`);
* the question's entity linking: the best linked entity's score (``link``) and how many were linked
  (``n_entities``), and the number of candidates (``n_candidates``);
* with a cross-encoder reranker (the ranker's second arm), the cross-encoder's score of the question with the
  candidate and its support (``ce``), for the :data:`CE_TOP` best by the hand-set ranking (NaN for the others).

**Model files** (:class:`RankerModel`): ``answer-ranker.onnx`` (the trees, converted from LightGBM with
onnxmltools and run with ONNX Runtime, which the query path loads anyway, so answering imports neither LightGBM
nor scikit-learn) beside ``answer-ranker.json`` (the feature names, the calibrated confidence and its threshold,
the reranker it was trained with, the training and calibration ids and the data checksums, the command).  The
bi-encoder arm ships in ``hqa/data/ranker/``; the cross-encoder arm lives beside the fine-tuned cross-encoder in
the model cache (:func:`for_reranker` finds the one that fits the reranker that ran).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from hqa.answering import selective
from hqa.answering.candidates import AnswerCandidate, CandidateFeatures, Embed, candidate_features, fold, \
    rank_candidates, score_candidates
from hqa.retrievers.base import Evidence

__all__ = ["FEATURES", "CE_TOP", "FORMAT", "MODEL_FILE", "META_FILE", "Featurized", "RankerModel",
           "featurize", "featurize_with", "feature_matrix", "ranked", "rank_pool", "typing_parts", "candidate_text",
           "shipped_dir", "load_model", "for_reranker"]

FORMAT = 1  # bump when FEATURES or the files change: a model of another format is not used
MODEL_FILE, META_FILE = "answer-ranker.onnx", "answer-ranker.json"
#: candidates (by the hand-set ranking) the cross-encoder scores; a value chosen here (each costs one pair)
CE_TOP = 10

_TEXT_TERMS = ("sim", "hyp", "ev", "rank", "near")
_KG_TERMS = ("kg_sim", "kg_hyp", "kg_ev", "kg_rank", "kg_rel")
_KINDS = ("person", "place", "organisation", "work", "date", "number")
FEATURES: tuple[str, ...] = (
    "hand", "hand_gap", "hand_pos", *_TEXT_TERMS, *_KG_TERMS, "ev_gap",
    "kg", "text", "title", "sparql", "triples", "n_kinds", "sup", "n_offers", "mentions",
    "type", "lower", "overlap", "words",
    "q_type", *(f"is_{k}" for k in _KINDS), "fit",
    "link", "n_entities", "n_candidates", "ce")


def candidate_text(c: AnswerCandidate) -> str:
    """What the cross-encoder reads of a candidate beside the question: ``answer — its support``."""
    return f"{c.text} — {' '.join(c.support.split())}"


@dataclass
class Featurized:
    """A question's candidates before the learned ranking: the hand-ranked ones (best first), their kinds and
    their offers' terms (``terms``: per candidate, the best value of each term over its offers, and what offered it),
    and the cross-encoder's scores (``ce``, NaN where it did not score)."""

    question: str
    hand: list[AnswerCandidate]
    kinds: list[set[str]]
    terms: list[dict[str, float]]
    link: float = 0.0
    n_entities: int = 0
    ce: list[float] = field(default_factory=list)


def _get(entity: Any, key: str) -> Any:
    return entity.get(key) if isinstance(entity, dict) else getattr(entity, key, None)


def _offer_terms(cf: CandidateFeatures, evidence_ev: float, mentioned: int) -> dict[str, float]:
    """The best of each term over the candidate's offers, where they came from, and its candidate-level terms."""
    best: dict[str, float] = {}
    for _offer, terms in cf.offers:
        for name, value in terms.items():
            best[name] = max(best.get(name, -math.inf), float(value))
    kinds = {o.kind for o, _ in cf.offers}
    sources = {o.evidence.source for o, _ in cf.offers}
    evs = [float(o.evidence.score or 0.0) for o, _ in cf.offers]
    out = {name: best.get(name, math.nan) for name in (*_TEXT_TERMS, *_KG_TERMS)}
    if "kg" not in kinds:
        out.update(dict.fromkeys(_KG_TERMS, math.nan))
    if kinds <= {"kg"}:
        out.update(dict.fromkeys(_TEXT_TERMS, math.nan))
    out.update({"ev_gap": max(evs) - evidence_ev, "kg": float("kg" in kinds), "text": float("text" in kinds),
                "title": float("title" in kinds), "sparql": float("sparql" in sources),
                "triples": float("triples" in sources), "n_kinds": float(len(kinds)),
                "n_offers": math.log1p(len(cf.offers)), "mentions": math.log1p(mentioned),
                "words": float(len(cf.text.split())), **{k: float(v) for k, v in cf.terms.items()}})
    return out


def typing_parts(tb: Any) -> tuple[Any, Any]:
    """A toolbox's KG store and label index, which type answer candidates (None for a part that cannot open)."""
    try:
        sparql = tb.sparql
    except Exception:  # noqa: BLE001 - no KG (or one that cannot start): candidates have no KG types
        sparql = None
    try:
        linker = getattr(tb.linker, "inner", tb.linker)  # its entities' descriptions type the candidates
    except Exception:  # noqa: BLE001 - no label index: no description types
        linker = None
    return sparql, linker


def featurize(question: str, evidence: Sequence[Evidence | dict], *, entities: Sequence[Any] = (),
              embed: Embed | None = None, sparql: Any = None, linker: Any = None,
              pair_scores: Callable[[str, list[str]], np.ndarray] | None = None) -> Featurized:
    """The candidates of ``evidence`` with everything :func:`feature_matrix` reads: the hand-set ranking
    (:func:`~hqa.answering.candidates.rank_candidates`'s terms), each candidate's kinds (its KG classes asked of
    ``sparql`` in one query for all candidates, else its short description in ``linker``) and, given
    ``pair_scores`` (a cross-encoder's ``scores(query, texts)``), its cross-encoder score."""
    items = [e if isinstance(e, Evidence) else Evidence(**e) for e in evidence]
    feats = candidate_features(question, items, entities=entities, embed=embed)
    hand = score_candidates(feats, None, max_candidates=len(feats))
    by_text = {c.text: c for c in feats}
    known = selective.kg_types([q for c in hand for q in c.qids], sparql)
    kinds = [selective.candidate_types(c, known=known, linker=linker) for c in hand]
    folded = [f" {fold(e.text)} " for e in items]
    top_ev = max((float(e.score or 0.0) for e in items), default=0.0)
    terms = [_offer_terms(by_text[c.text], top_ev, sum(f" {fold(c.text)} " in t for t in folded)) for c in hand]
    links = [float(_get(e, "score") or 0.0) for e in entities]
    ce = [math.nan] * len(hand)
    if pair_scores is not None and hand:
        top = hand[:CE_TOP]
        ce[: len(top)] = [float(s) for s in pair_scores(question, [candidate_text(c) for c in top])]
    return Featurized(question, hand, kinds, terms, max(links, default=0.0), len(links), ce)


def feature_matrix(f: Featurized) -> np.ndarray:
    """One row of :data:`FEATURES` per candidate of ``f`` (float32, NaN = missing)."""
    if not f.hand:
        return np.zeros((0, len(FEATURES)), dtype=np.float32)
    expected = selective.expected_type(f.question)
    q_type = float(selective.TYPES.index(expected))
    best = f.hand[0].score
    rows = []
    for i, (c, kinds, terms) in enumerate(zip(f.hand, f.kinds, f.terms)):
        row = {**terms, "hand": c.score, "hand_gap": c.score - best, "hand_pos": 1.0 / (1 + i), "q_type": q_type,
               **{f"is_{k}": float(k in kinds) for k in _KINDS}, "fit": float(selective.type_fit(expected, kinds)),
               "link": f.link, "n_entities": float(f.n_entities), "n_candidates": math.log1p(len(f.hand)),
               "ce": f.ce[i] if i < len(f.ce) else math.nan}
        rows.append([row[name] for name in FEATURES])
    return np.asarray(rows, dtype=np.float32)


class RankerModel:
    """A trained arm: the ONNX trees and the metadata beside them (see the module docstring)."""

    def __init__(self, folder: Path):
        import onnxruntime as ort

        self.folder = Path(folder)
        self.meta: dict[str, Any] = json.loads((self.folder / META_FILE).read_text(encoding="utf-8"))
        data = (self.folder / MODEL_FILE).read_bytes()
        if self.meta.get("format") != FORMAT or list(self.meta.get("features", ())) != list(FEATURES):
            raise ValueError(f"{self.folder / META_FILE} is of another format (hqa train ranker rebuilds it)")
        if hashlib.sha256(data).hexdigest() != self.meta.get("model_sha256"):
            raise ValueError(f"{self.folder / MODEL_FILE} does not match its checksum in {META_FILE}")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # a few dozen rows: threads cost more than they give
        self._session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        self._input = self._session.get_inputs()[0].name
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """``learned <arm> <first 12 digits of the trees' SHA-256>``: which trained model ranked (no path, so traces
        compare across machines)."""
        return f"learned {self.meta.get('arm', '?')} {str(self.meta.get('model_sha256', ''))[:12]}"

    @property
    def calibration(self) -> dict[str, Any]:
        """The confidence model and threshold, in :func:`hqa.answering.selective.confidence`'s shape."""
        return self.meta["confidence"]

    def predict(self, x: np.ndarray) -> np.ndarray:
        if not len(x):
            return np.zeros(0, dtype=np.float32)
        with self._lock:
            # a missing term (NaN) is 0, as the trees were trained (hqa.optimize.answer_ranker.lgb_params)
            out = self._session.run(None, {self._input: np.nan_to_num(np.asarray(x, dtype=np.float32), nan=0.0)})[0]
        return np.asarray(out, dtype=np.float32).reshape(len(x))


def ranked(model: RankerModel, f: Featurized, max_candidates: int = 8) -> list[AnswerCandidate]:
    """``f``'s candidates in the order of ``model``'s scores (ties keep the hand-set order), at most
    ``max_candidates``; each one's ``score`` is the model's, its ``features`` hold the rows' values too
    (``hand`` is the hand-set score) and ``kinds`` its kinds, for the selective decision."""
    scores = model.predict(feature_matrix(f))
    order = sorted(range(len(f.hand)), key=lambda i: (-float(scores[i]), i))[:max_candidates]
    out = []
    for i in order:
        c = f.hand[i]
        extra = {"hand": c.score, "link": f.link, "mentions": f.terms[i]["mentions"], "n_kinds": f.terms[i]["n_kinds"],
                 "ce": f.ce[i] if i < len(f.ce) else math.nan}  # selective.LEARNED_FEATURES
        out.append(dataclasses.replace(c, score=float(scores[i]), features={**c.features, **extra},
                                       kinds=sorted(f.kinds[i])))
    return out


def shipped_dir() -> Path:
    """``hqa/data/ranker``: the bi-encoder arm that ships."""
    return Path(str(resources.files("hqa.data").joinpath("ranker")))


@lru_cache(maxsize=8)
def _load(folder: str, stamp: tuple) -> RankerModel:
    return RankerModel(Path(folder))


def load_model(folder: Path) -> RankerModel | None:
    """The arm in ``folder`` (cached per process while its files stay the same), None when it has none."""
    folder = Path(folder)
    files = [folder / META_FILE, folder / MODEL_FILE]
    if not all(p.is_file() for p in files):
        return None
    return _load(str(folder), tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in files))


def reranker_arm(reranker: Any) -> tuple[str, Path | None]:
    """Which arm fits ``reranker`` and where it lives: ``bi-encoder`` (the shipped folder) for the bi-encoder on
    the packaged MiniLM, ``cross-encoder`` (the model's own folder) for a cross-encoder fine-tuned by ``hqa train
    reranker``; no folder for any other reranker."""
    kind = str(getattr(reranker, "kind", "") or "")
    if kind == "cross-encoder":
        folder = Path(str(getattr(reranker, "model_name", "") or "")).expanduser()
        return kind, (folder if folder.is_dir() else None)
    if kind == "bi-encoder":
        return kind, (shipped_dir() if getattr(reranker, "embedder_key", None) == "minilm" else None)
    return kind or "reranker", None  # another reranker (a stand-in): no arm was trained with it


def for_reranker(reranker: Any) -> tuple[RankerModel | None, str]:
    """The learned arm for the reranker that runs, or None and why not (the caller then ranks by hand)."""
    kind, folder = reranker_arm(reranker)
    if folder is None:
        return None, f"no learned ranker for this {kind}"
    try:
        model = load_model(folder)
    except (OSError, ValueError) as e:
        return None, f"the {kind}'s learned ranker cannot be used: {e}"
    if model is None:
        return None, f"no learned ranker for the {kind} yet (hqa train ranker writes it)"
    return model, ""


def featurize_with(toolbox: Any, question: str, pool: Sequence[Evidence | dict], entities: Sequence[Any] = (),
                   cross: bool = False) -> Featurized:
    """:func:`featurize` of ``pool`` with ``toolbox``'s parts: its embedder, its KG and label index for the
    candidates' kinds and, with ``cross``, its cross-encoder reranker's scores."""
    sparql, linker = typing_parts(toolbox)
    return featurize(question, pool, entities=entities, embed=toolbox.embed_texts, sparql=sparql, linker=linker,
                     pair_scores=toolbox.reranker.scores if cross else None)


def rank_pool(question: str, pool: Sequence[Evidence | dict], *, entities: Sequence[Any], toolbox: Any, n: int,
              mode: str) -> tuple[list[AnswerCandidate], str, RankerModel | None]:
    """The ``n`` best candidates of the evidence ``pool``: with ``mode`` ``learned``, by the learned arm for the
    toolbox's reranker (:func:`for_reranker`; by hand when there is none for it), else by the hand-set weights
    (:func:`~hqa.answering.candidates.rank_candidates`).  Also the name of the ranking that chose them (``hand``,
    ``hand (<why not learned>)`` or the arm's name) and the learned model, when one ranked."""
    model, why = for_reranker(toolbox.reranker) if mode == "learned" else (None, "")
    if model is None:
        return (rank_candidates(question, pool, entities=entities, embed=toolbox.embed_texts, max_candidates=n),
                f"hand ({why})" if why else "hand", None)
    f = featurize_with(toolbox, question, pool, entities, cross=model.meta.get("arm") == "cross-encoder")
    return ranked(model, f, n), model.name, model

"""Answer metrics shared by evaluation and the DSPy optimizers.

All string comparisons go through :func:`normalize_answer` (SQuAD-style normalisation plus a few
knowledge-base-specific rules).  A prediction may be a single string or a list of candidate answers.
:func:`hits_at_1` is HumanIQ §4.3's automatic "hits@1 exact match" for CompMix and Mintaka; :func:`qald_prf` /
:func:`macro_f1_qald` the QALD measure HumanIQ §4.3 uses for QALD ("Macro F1", GERBIL QA's rules for empty sets).

The ``*_metric`` functions follow DSPy's metric signature ``metric(example, pred, trace=None)``: they return
the float score when ``trace is None`` (evaluation) and a strict pass/fail bool otherwise (bootstrapping).
"""

from __future__ import annotations

import contextlib
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["METRICS", "THRESHOLDS", "answer_recall", "em_metric", "exact_match", "f1_metric", "hits1_metric",
           "hits_at_1", "macro_f1_qald", "normalize_answer", "qald_prf", "recall_metric", "score_all", "split_answers",
           "token_f1"]

Pred = str | Sequence[str] | None

# "2021-06-24T00:00:00Z", "+1985-01-01T00:00:00Z", "2021-06-24T10:20:30.5+02:00" → "2021-06-24".
_ISO_DATETIME_RE = re.compile(
    r"(?<![\d-])[+]?(-?\d{4,}-\d{2}-\d{2})T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?(?![\d:])")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_MONTH_RE = "(" + "|".join(_MONTHS) + ")"
# "21 May 1994", "May 21, 1994", "May 21 1994", "1994-05-21" → "1994 05 21" (a year stays its own token, so a
# full date still contains the gold year)
_DMY_RE = re.compile(rf"\b(\d{{1,2}}) {_MONTH_RE},? (\d{{3,4}})\b", re.I)
_MDY_RE = re.compile(rf"\b{_MONTH_RE} (\d{{1,2}}),? (\d{{3,4}})\b", re.I)
_YMD_RE = re.compile(r"(?<![\d-])(\d{4})-(\d{2})-(\d{2})(?![\d])")
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_QID_RE = re.compile(r"(?<![A-Za-z0-9])(Q[1-9]\d*)(?![0-9A-Za-z])")
_BARE_QID_RE = re.compile(r"^\s*(?:wd:)?(Q[1-9]\d*)\s*$")
_SPLIT_RE = re.compile(r" \| |;|\n")
_ASCII_PUNCT = frozenset(string.punctuation)
_BOOLS = {"true": "yes", "false": "no"}


def _is_punct(ch: str) -> bool:
    """ASCII punctuation (as in SQuAD) plus any Unicode punctuation (dashes, curly quotes, ...)."""
    return ch in _ASCII_PUNCT or unicodedata.category(ch).startswith("P")


# -- "no answer" ----------------------------------------------------------------------------------------------
NO_ANSWER = {"", "none", "null", "nil", "unknown", "n/a", "na", "nan", "no answer", "[]", "[none]"}
_NO_ANSWER_RE = re.compile(  # a whole answer that is a no-answer word, or a reply opening with a no-answer phrase
    r"^(?:(?:unknown|none|null|nil|n/?a|no answer|no information|cannot|can't|unable)\W*$|not (?:mentioned|found|"
    r"given|specified|provided|available|stated|known|sure)\b|i (?:do not|don't|dont) know\b|(?:cannot|can't|unable "
    r"to) (?:find|answer|determine|tell|say)\b|the (?:passages?|context|text) (?:do|does) not\b|there is no\b)", re.I)


def is_empty_answer(value: Any) -> bool:
    """True when ``value`` is empty or says there is no answer: "None", "unknown", "[]", "n/a", "I don't know",
    "not mentioned", "the passages do not …".  The one definition every program, the trace parser and the
    reports use ("no" is an answer: yes/no questions)."""
    if value is None:
        return True
    text = " | ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    text = text.strip().rstrip(",").strip().strip("[]").strip().strip("\"'`*").strip().rstrip(".").strip()
    return text.lower() in NO_ANSWER or normalize_answer(text) in NO_ANSWER or bool(_NO_ANSWER_RE.match(text))


def _ymd(year: str, month: str, day: str) -> str:
    return f"{int(year):04d} {_MONTHS.index(month.lower()) + 1:02d} {int(day):02d}"


def normalize_answer(s: Any) -> str:
    """Normalise an answer string for comparison.

    Steps: ISO datetimes → their date part; calendar dates written day-month-year, month-day-year or ISO → "YYYY MM
    DD" (so "21 May 1994" equals "May 21, 1994", and still contains the year "1994"); lowercase; fold accents; drop
    punctuation; drop the articles a/an/the; collapse whitespace; finally a lone "true"/"false" becomes "yes"/"no".
    ``None`` normalises to the empty string; other non-strings are converted with ``str``.
    """
    if s is None:
        return ""
    text = _ISO_DATETIME_RE.sub(r"\1", str(s))
    text = _DMY_RE.sub(lambda m: _ymd(m.group(3), m.group(2), m.group(1)), text)
    text = _MDY_RE.sub(lambda m: _ymd(m.group(3), m.group(1), m.group(2)), text)
    text = _YMD_RE.sub(lambda m: f"{m.group(1)} {m.group(2)} {m.group(3)}", text)
    # fold diacritics ("Beyoncé" → "Beyonce") so accent-less predictions still match
    text = "".join(ch for ch in unicodedata.normalize("NFKD", text.lower()) if not unicodedata.combining(ch))
    text = "".join(ch for ch in text if not _is_punct(ch))
    text = _ARTICLES_RE.sub(" ", text)
    text = " ".join(text.split())
    return _BOOLS.get(text, text)


def _as_list(value: Pred | Iterable[str]) -> list[str]:
    """A single string becomes a one-element list; ``None`` an empty one; other iterables a list of str."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value if v is not None]


def _norm_golds(golds: Iterable[str] | str | None) -> list[str]:
    """Normalised, non-empty gold answers."""
    return [g for g in (normalize_answer(x) for x in _as_list(golds)) if g]


def split_answers(pred: str) -> list[str]:
    """Split a multi-answer string on ``" | "``, ``";"`` or newlines; empty pieces are dropped."""
    return [p.strip() for p in _SPLIT_RE.split(pred) if p.strip()]


def exact_match(pred: Pred, golds: Iterable[str] | str) -> float:
    """1.0 if the normalised prediction (or any element of a list prediction) equals a normalised gold."""
    gold_set = set(_norm_golds(golds))
    return float(any(normalize_answer(p) in gold_set for p in _as_list(pred)))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    """SQuAD token F1 between two token lists."""
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    p, r = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * p * r / (p + r) if same else 0.0


def token_f1(pred: Pred, golds: Iterable[str] | str) -> float:
    """Best SQuAD token F1 over all golds (and over all elements of a list prediction)."""
    gold_tokens = [g.split() for g in _norm_golds(golds)]
    pred_tokens = [t for t in (normalize_answer(p).split() for p in _as_list(pred)) if t]
    return max((_f1(p, g) for p in pred_tokens for g in gold_tokens), default=0.0)


def answer_recall(pred: Pred, golds: Iterable[str] | str) -> float:
    """1.0 if some normalised gold occurs as a whole-token substring of some normalised prediction."""
    golds_n = _norm_golds(golds)
    return float(any(f" {g} " in f" {normalize_answer(p)} " for p in _as_list(pred) for g in golds_n))


def hits_at_1(pred: Pred, golds: Iterable[str] | str, gold_ids: Iterable[str] = ()) -> float:
    """1.0 if the first predicted answer matches a gold label (EM) or carries a gold QID.

    A first answer that is a bare QID ("Q42", "wd:Q42") or mentions one ("Douglas Adams (Q42)",
    "http://www.wikidata.org/entity/Q42") counts when that QID is in ``gold_ids``.
    """
    items = _as_list(pred)  # the first answer: first list element, first piece of a split string
    first = next(iter(split_answers(items[0])), "") if items else ""
    if not first:
        return 0.0
    if exact_match(first, golds):
        return 1.0
    ids = {g.strip().upper() for g in _as_list(gold_ids) if g and g.strip()}
    if ids:
        bare = _BARE_QID_RE.match(first)
        found = [bare.group(1)] if bare else _QID_RE.findall(first)
        if any(q.upper() in ids for q in found):
            return 1.0
    return 0.0


# -- QALD answer-set measures (GERBIL QA) ---------------------------------------------------------------------
def _answer_set(pred: Pred) -> list[str]:
    """A prediction as a set of answers: list elements, each split on " | ", ";" or newlines; a prediction that is
    empty or says there is no answer (:func:`is_empty_answer`) is the empty set."""
    items = [piece for item in _as_list(pred) for piece in split_answers(item)]
    return list(dict.fromkeys(i for i in items if not is_empty_answer(i)))


def qald_prf(pred: Pred, golds: Iterable[str] | str, gold_ids: Iterable[str] = ()) -> tuple[float, float, float]:
    """Precision, recall and F1 of one question over answer sets, as GERBIL QA computes "Macro F1 QALD"
    (QALD-9/QALD-10 ranking; the measure of HumanIQ Table 2):

    * gold and answer both empty → (1, 1, 1);
    * gold non-empty, answer empty (the system did not answer) → (1, 0, 0);
    * gold empty, answer non-empty → (0, 0, 0);
    * otherwise precision = answers matching some gold / answers, recall = golds matched / golds.

    An answer matches a gold when their normalised forms are equal, or when it names a QID of ``gold_ids`` that is
    itself a gold (QALD-10 entity golds are QIDs).  Plain GERBIL "Macro F1" differs only in the second rule
    (an empty answer scores (0, 0, 0)); :func:`macro_f1_qald` reports both."""
    gold = list(dict.fromkeys(_norm_golds(golds)))
    ids = {g.strip().upper() for g in _as_list(gold_ids) if g and g.strip()}
    answers = _answer_set(pred)
    if not gold:
        return (1.0, 1.0, 1.0) if not answers else (0.0, 0.0, 0.0)
    if not answers:
        return (1.0, 0.0, 0.0)
    matched_gold: set[str] = set()
    good = 0
    for a in answers:
        norm = normalize_answer(a)
        hits = {g for g in gold if g == norm}
        hits |= {g for g in gold if g.upper() in ids and g.upper() in {q.upper() for q in _QID_RE.findall(a)}}
        if hits:
            good += 1
            matched_gold |= hits
    if not good:
        return (0.0, 0.0, 0.0)
    p, r = good / len(answers), len(matched_gold) / len(gold)
    return (p, r, 2 * p * r / (p + r))


def macro_f1_qald(items: Iterable[tuple[Pred, Iterable[str], Iterable[str]]]) -> dict[str, float | int | None]:
    """Macro measures over ``(answer, golds, gold_ids)`` triples, GERBIL QA's definitions:

    ``precision`` / ``recall`` = per-question values of :func:`qald_prf` averaged; ``f1_qald`` = the harmonic mean
    of those two averages ("Macro F1 QALD", the QALD challenges' ranking measure); ``f1`` = the per-question F1
    averaged ("Macro F1", where an empty answer counts 0 — it is also 0 under the QALD rules)."""
    prfs = [qald_prf(a, g, i) for a, g, i in items]
    if not prfs:
        return {"n": 0, "precision": None, "recall": None, "f1": None, "f1_qald": None}
    n = len(prfs)
    p = sum(x[0] for x in prfs) / n
    r = sum(x[1] for x in prfs) / n
    return {"n": n, "precision": round(p, 4), "recall": round(r, 4), "f1": round(sum(x[2] for x in prfs) / n, 4),
            "f1_qald": round(2 * p * r / (p + r), 4) if p + r else 0.0}


def score_all(pred: Pred, golds: Iterable[str] | str, gold_ids: Iterable[str] = ()) -> dict[str, float]:
    """All per-question scores at once: ``{"em", "f1", "recall", "hits1", "qald_f1"}`` (``qald_f1`` is the
    per-question F1 of :func:`qald_prf`; its macro average is GERBIL's "Macro F1")."""
    golds_l = _as_list(golds)
    return {"em": exact_match(pred, golds_l), "f1": token_f1(pred, golds_l), "recall": answer_recall(pred, golds_l),
            "hits1": hits_at_1(pred, golds_l, gold_ids), "qald_f1": round(qald_prf(pred, golds_l, gold_ids)[2], 4)}


# --------------------------------------------------------------------------------------------- DSPy metrics

# Pass mark used when DSPy calls a metric with a trace (bootstrapping keeps a demo only if it passes).
THRESHOLDS: dict[str, float] = {"em": 1.0, "f1": 0.5, "recall": 1.0, "hits1": 1.0}


def _field(obj: Any, name: str, default: Any = None) -> Any:
    """Read ``name`` from a dspy Example/Prediction, a dict or any object."""
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    getter = getattr(obj, "get", None)
    if callable(getter):
        with contextlib.suppress(TypeError, KeyError):
            return getter(name, default)
    return getattr(obj, name, default)


def _gold_of(example: Any) -> tuple[list[str], list[str]]:
    """Gold labels (``answers``, falling back to ``answer``) and gold ids (``answer_ids``) of an example."""
    answers = _field(example, "answers")
    answers = _field(example, "answer") if answers is None else answers
    return _as_list(answers), _as_list(_field(example, "answer_ids", []))


def _result(score: float, name: str, trace: Any) -> float | bool:
    """Float for evaluation, strict bool (``score >= threshold``) when bootstrapping."""
    return score if trace is None else bool(score >= THRESHOLDS[name])


def em_metric(example: Any, pred: Any, trace: Any = None) -> float | bool:
    """DSPy metric: exact match of ``pred.answer`` against ``example.answers``."""
    return _result(exact_match(_field(pred, "answer"), _gold_of(example)[0]), "em", trace)


def f1_metric(example: Any, pred: Any, trace: Any = None) -> float | bool:
    """DSPy metric: token F1 of ``pred.answer`` against ``example.answers`` (passes at F1 >= 0.5)."""
    return _result(token_f1(_field(pred, "answer"), _gold_of(example)[0]), "f1", trace)


def recall_metric(example: Any, pred: Any, trace: Any = None) -> float | bool:
    """DSPy metric: answer-in-prediction recall of ``pred.answer`` against ``example.answers``."""
    return _result(answer_recall(_field(pred, "answer"), _gold_of(example)[0]), "recall", trace)


def hits1_metric(example: Any, pred: Any, trace: Any = None) -> float | bool:
    """DSPy metric: Hits@1 of ``pred.answer`` against ``example.answers`` and ``example.answer_ids``."""
    golds, ids = _gold_of(example)
    return _result(hits_at_1(_field(pred, "answer"), golds, ids), "hits1", trace)


METRICS: dict[str, Callable[..., float | bool]] = {"em": em_metric, "f1": f1_metric, "recall": recall_metric,
                                                   "hits1": hits1_metric}

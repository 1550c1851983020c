"""Train the learned answer ranker (``hqa train ranker``; the ranking itself is :mod:`hqa.answering.ranker`).

1. **Questions.**  ``compmix/train`` (``--train``): every question the offline world can answer and the others
   evenly spaced through the split, ``--train-limit`` in all; a question any evaluation set also holds (by id or
   by its text, :func:`hqa.data.datasets.question_key`) is dropped.  ``compmix/dev`` (``--dev``) for calibration:
   its answerable questions and an even sample of the whole split (``--dev-limit``), which stands for all of it.
2. **Candidates.**  For each question the ``simple`` program's own hop and candidates
   (:meth:`hqa.programs.simple.SimpleHybrid.retrieve` / ``featurize``, with the configured reranker), each labelled
   right when it holds a gold answer (answer-in-prediction recall, as ``hqa evaluate`` scores).  Cached per
   question in ``artifacts/cache/ranker/`` (keyed by the pack, the reranker and :data:`~hqa.answering.ranker.FORMAT`).
3. **Ranking.**  LightGBM's lambdarank, one group per training question with a right candidate (a question without
   one teaches no order); the trees are converted to ONNX (onnxmltools) and checked against LightGBM's own scores.
4. **Confidence.**  A logistic regression of "the best candidate is right" on the best candidate's terms
   (:func:`hqa.answering.selective.confidence_features`), fitted on the dev questions whose best candidate fits the
   expected type; the threshold is the lowest whose dev precision of answered questions reaches ``--target`` on the
   answerable dev questions and ``--target-all`` on the even sample (the most coverage that meets both; when none
   does, the threshold with the highest answerable precision at a coverage of at least 0.2 of them).
5. **Files.**  ``answer-ranker.onnx`` and ``answer-ranker.json`` (:class:`hqa.answering.ranker.RankerModel`): the
   bi-encoder arm into ``hqa/data/ranker/`` (the shipped one), a cross-encoder arm into the fine-tuned
   cross-encoder's folder; ``--out`` elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hqa.answering import ranker as learned
from hqa.answering import selective
from hqa.errors import ConfigError
from hqa.scoring.metrics import answer_recall

__all__ = ["RankerOptions", "Pool", "questions", "pools", "pools_cache", "reranker_key", "fit_ranker", "calibrate",
           "train", "held_out"]

MIN_COVERAGE = 0.2  # the fallback threshold's least coverage of the answerable dev questions (a value chosen here)


@dataclass
class RankerOptions:
    """What ``hqa train ranker`` trains on and for (see the module docstring)."""

    train: str = "compmix/train"
    dev: str = "compmix/dev"
    train_limit: int | None = 1200
    dev_limit: int | None = 500
    target: float = 0.85  # precision of the answered answerable dev questions (the target)
    target_all: float = 0.7  # precision of the answered questions of the dev sample (the target on all)
    rounds: int = 150
    leaves: int = 15
    learning_rate: float = 0.05
    min_child: int = 20
    seed: int = 0
    out: str | None = None
    command: str = ""

    def validate(self) -> "RankerOptions":
        from hqa.data.datasets import DATASET_SPECS

        for name in ("train", "dev"):
            if getattr(self, name).split(":")[0] not in DATASET_SPECS:
                raise ConfigError(f"--{name}: unknown dataset {getattr(self, name)!r}")
        for name in ("train_limit", "dev_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
        if not (0 < self.target <= 1 and 0 < self.target_all <= 1):
            raise ConfigError("--target and --target-all are precisions between 0 and 1")
        if not (1 <= self.rounds <= 5000 and 2 <= self.leaves <= 255 and 0 < self.learning_rate <= 1):
            raise ConfigError("--rounds 1..5000, --leaves 2..255, --learning-rate in (0, 1]")
        return self


@dataclass
class Pool:
    """One question's candidates as the program draws them, labelled."""

    id: str
    question: str
    gold: list[str]
    answerable: bool
    featurized: learned.Featurized
    labels: list[int] = field(default_factory=list)
    kept: list[Any] = field(default_factory=list)  # the hop's kept evidence (the cross-encoder's training pairs)
    sample: bool = False  # in the even sample of the whole split (calibration)


# -- questions --------------------------------------------------------------------------------------------------
def held_out(exclude: tuple[str, ...]) -> tuple[set[str], set[str]]:
    """The ids and question keys of every record of the dataset specs ``exclude``."""
    from hqa.data.datasets import question_key
    from hqa.optimize.compile import excluded_questions

    records = excluded_questions(exclude)
    return {str(r.id) for r in records}, {question_key(r.question) for r in records}


def questions(spec: str, limit: int | None, pack_dir: Path, exclude: tuple[str, ...] = (),
              answerable_first: bool = True) -> tuple[list, set[str], set[str]]:
    """(records, answerable ids, ids of the even sample) of ``spec`` without the questions of ``exclude``:
    ``limit`` of them — with ``answerable_first`` every answerable one (evenly spaced when there are more) and the
    rest evenly spaced, else the
    answerable ones *and* an even sample of ``limit`` over the whole split (see the module docstring)."""
    from hqa.data.datasets import load_dataset, question_key

    name = spec.split(":")[0]
    ids, keys = held_out(tuple(s for s in exclude if s.split(":")[0] != name))
    records = [r for r in load_dataset(spec) if str(r.id) not in ids and question_key(r.question) not in keys]
    answerable = {str(r.id) for r in load_dataset(f"{name}:answerable", pack_dir=pack_dir)}
    if limit is None or limit >= len(records):
        return records, answerable, {str(r.id) for r in records}
    if answerable_first:
        keep = [r for r in records if str(r.id) in answerable]
        if len(keep) > limit:  # more answerable ones than asked for: those evenly spaced
            keep = [keep[int(i * len(keep) / limit)] for i in range(limit)]
        rest = [r for r in records if str(r.id) not in answerable]
        n = max(limit - len(keep), 0)
        chosen = {str(r.id) for r in keep} | {str(rest[int(i * len(rest) / n)].id) for i in range(min(n, len(rest)))}
        return [r for r in records if str(r.id) in chosen], answerable, set()
    even = {str(records[int(i * len(records) / limit)].id) for i in range(limit)}
    return [r for r in records if str(r.id) in even or str(r.id) in answerable], answerable, even


# -- candidates -------------------------------------------------------------------------------------------------
def reranker_key(reranker) -> str:
    """What the cached candidates of a hop depend on in its reranker: the embedder for the bi-encoder; for a
    cross-encoder its folder *and* its weights (its files' sizes and its JSON files' bytes, the training metadata
    among them; not the answer ranker's arm written beside it), so a cross-encoder trained again in the same folder
    never reads the old one's candidates, and training its arm does not change the key."""
    if reranker.kind != "cross-encoder":
        return str(reranker.embedder_key)
    folder = Path(str(reranker.model_name)).expanduser()
    h = hashlib.sha256(str(reranker.model_name).encode())
    if folder.is_dir():
        for f in sorted(folder.iterdir()):  # the answer ranker's own files beside it are not the cross-encoder's
            if f.is_file() and f.name not in (learned.META_FILE, learned.MODEL_FILE):
                h.update(f"{f.name}|{f.stat().st_size}".encode())
                if f.suffix == ".json":
                    h.update(f.read_bytes())
    return f"{reranker.model_name}@{h.hexdigest()[:12]}"


def pools_cache(settings, reranker) -> Path:
    """Where :func:`pools` keeps the candidates of the hops ``reranker`` ranked (artifacts/cache/ranker/), one file
    per pack version, ranker format and :func:`reranker_key`."""
    arm, _ = learned.reranker_arm(reranker)
    version = json.loads((settings.pack_dir / "manifest.json").read_text()).get("version", "?")
    key = hashlib.sha256(f"{learned.FORMAT}|{version}|{arm}|{reranker_key(reranker)}".encode()).hexdigest()[:16]
    return settings.artifacts_dir / "cache" / "ranker" / f"pools-{arm}-{key}.pkl"


def pools(program, records, answerable: set[str], sample: set[str], cache: Path | None, cross: bool = False,
          say: Callable[[str], None] = lambda _m: None) -> list[Pool]:
    """Each record's :class:`Pool` from ``program`` (a ``simple`` program on the toolbox to train for), the
    already computed ones read from ``cache`` (written every 100 questions and at the end)."""
    store: dict[str, Any] = {}
    if cache is not None and cache.exists():
        store = pickle.loads(cache.read_bytes())
    out, added, start = [], 0, time.monotonic()
    for i, r in enumerate(records):
        rid = str(r.id)
        if rid not in store:
            hop = program.retrieve(r.question)
            f = program.featurize(r.question, hop, cross)
            store[rid] = {"featurized": f, "kept": list(hop.kept[: program.pool])}
            added += 1
            if cache is not None and added % 100 == 0:
                _save(cache, store)
                say(f"{i + 1}/{len(records)} questions ({time.monotonic() - start:.0f} s)")
        f = store[rid]["featurized"]
        out.append(Pool(rid, r.question, list(r.answers), rid in answerable, f,
                        [int(bool(answer_recall(c.text, r.answers))) for c in f.hand], store[rid]["kept"],
                        rid in sample))
    if cache is not None and added:
        _save(cache, store)
    return out


def _save(path: Path, store: dict) -> None:
    from hqa.io.files import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, pickle.dumps(store))


# -- ranking ----------------------------------------------------------------------------------------------------
def _groups(data: list[Pool]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    taught = [p for p in data if any(p.labels)]
    if not taught:
        raise ConfigError("no training question has a right candidate: nothing to learn an order from")
    x = np.vstack([learned.feature_matrix(p.featurized) for p in taught])
    y = np.concatenate([np.asarray(p.labels, dtype=np.int32) for p in taught])
    return x, y, [len(p.labels) for p in taught]


def lgb_params(opts: RankerOptions) -> dict[str, Any]:
    return {"objective": "lambdarank", "num_leaves": opts.leaves, "learning_rate": opts.learning_rate,
            "min_data_in_leaf": opts.min_child, "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1,
            "lambdarank_truncation_level": 10, "seed": opts.seed, "deterministic": True, "num_threads": 1,
            # a missing term counts as 0 (the "text" / "kg" flags say which kind offered a candidate): the ONNX trees
            # route a missing value where LightGBM does not in a split that saw none in training, so the scored
            # rows (hqa.answering.ranker.RankerModel.predict) have none
            "use_missing": False, "verbose": -1}


def fit_ranker(data: list[Pool], opts: RankerOptions):
    """LightGBM lambdarank over the questions of ``data`` that have a right candidate (one group each)."""
    import lightgbm as lgb

    x, y, group = _groups(data)
    dataset = lgb.Dataset(np.nan_to_num(x, nan=0.0), y, group=group, feature_name=list(learned.FEATURES), free_raw_data=False)
    return lgb.train(lgb_params(opts), dataset, num_boost_round=opts.rounds)


def to_onnx(booster) -> bytes:
    """The booster as an ONNX graph (onnxmltools), checked against LightGBM's own scores."""
    from onnxmltools import convert_lightgbm
    from onnxmltools.convert.common.data_types import FloatTensorType

    n = len(learned.FEATURES)
    onx = convert_lightgbm(booster, initial_types=[("features", FloatTensorType([None, n]))], target_opset=15,
                           zipmap=False)
    return onx.SerializeToString()


class _Scores:
    """A booster's scores in :class:`~hqa.answering.ranker.RankerModel`'s shape (``predict``)."""

    def __init__(self, booster):
        self.booster = booster

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.booster.predict(np.nan_to_num(x, nan=0.0)) if len(x) else np.zeros(0)


def top1(data: list[Pool], model=None) -> float:
    """Share of ``data`` whose best candidate is right: by ``model`` (its ``predict``) or by the hand-set ranking."""
    right = 0
    for p in data:
        if not p.labels:
            continue
        if model is None:
            right += p.labels[0]
        else:
            s = model.predict(learned.feature_matrix(p.featurized))
            right += p.labels[int(np.argmax(s))]
    return right / max(len(data), 1)


def cross_validate(data: list[Pool], opts: RankerOptions, folds: int = 5) -> dict[str, float]:
    """Top-1 of the hand-set ranking and of lambdarank in ``folds``-fold cross-validation over ``data``."""
    hand = learned_right = 0
    for k in range(folds):
        held = [p for i, p in enumerate(data) if i % folds == k]
        rest = [p for i, p in enumerate(data) if i % folds != k]
        model = _Scores(fit_ranker(rest, opts))
        hand += top1(held) * len(held)
        learned_right += top1(held, model) * len(held)
    return {"hand": round(hand / len(data), 4), "learned": round(learned_right / len(data), 4)}


# -- confidence -------------------------------------------------------------------------------------------------
#: the confidence model's inputs for the learned arm (the terms of selective.confidence_features)
CONFIDENCE = ("score", "margin", "fit", "kg", "kg_rel", "near", "sim", "sup", "n_candidates", "hand", "link",
              "mentions", "n_kinds")


def _decided(model, p: Pool) -> dict[str, Any] | None:
    """The best candidate of ``p`` under ``model`` with its confidence features and whether it is right."""
    if not p.featurized.hand:
        return None
    cands = learned.ranked(model, p.featurized, max_candidates=8)
    fit = selective.type_fit(selective.expected_type(p.question), set(cands[0].kinds or ()))
    return {"features": selective.confidence_features(cands, fit), "fit": fit,
            "right": bool(answer_recall(cands[0].text, p.gold)), "answerable": p.answerable, "sample": p.sample,
            "best": cands[0].text}


def calibrate(model, dev: list[Pool], opts: RankerOptions, names: tuple[str, ...] = CONFIDENCE) -> dict[str, Any]:
    """The logistic confidence and its threshold on ``dev`` (see the module docstring)."""
    from sklearn.linear_model import LogisticRegression

    rows = [d for p in dev if (d := _decided(model, p)) is not None]
    data = [r for r in rows if r["fit"] >= 0]
    if not data or len({r["right"] for r in data}) < 2:
        raise ConfigError("the dev questions give no right and wrong best candidates to calibrate on")
    x = np.array([[r["features"][f] for f in names] for r in data], dtype=float)
    y = np.array([r["right"] for r in data], dtype=int)
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std == 0] = 1.0
    clf = LogisticRegression(C=1.0, max_iter=5000).fit((x - mean) / std, y)
    conf = {"features": list(names), "weights": [round(float(w), 6) for w in clf.coef_[0]],
            "bias": round(float(clf.intercept_[0]), 6), "mean": [round(float(v), 6) for v in mean],
            "std": [round(float(v), 6) for v in std], "target_precision": opts.target,
            "target_precision_all": opts.target_all, "threshold": 1.0}
    for r in rows:
        r["conf"] = selective.confidence(r["features"], conf) if r["fit"] >= 0 else -1.0
    conf["threshold"], conf["dev"] = _threshold(rows, dev, opts)
    return conf


def _at(rows: list[dict], t: float, which: str, n: int) -> tuple[float, float, int]:
    """(coverage of the ``n`` questions, precision, answered) of the ``which`` rows at threshold ``t``."""
    answered = [r for r in rows if r[which] and r["conf"] >= t]
    right = sum(r["right"] for r in answered)
    return len(answered) / max(n, 1), (right / len(answered) if answered else 0.0), len(answered)


def _threshold(rows: list[dict], dev: list[Pool], opts: RankerOptions) -> tuple[float, dict[str, Any]]:
    n_ans = sum(p.answerable for p in dev)
    n_all = sum(p.sample for p in dev)
    options = sorted({round(r["conf"], 6) for r in rows if r["conf"] >= 0})
    met, fallback = None, None
    for t in options:  # lowest first: the first that meets both targets answers the most
        cov, prec, _ = _at(rows, t, "answerable", n_ans)
        _, prec_all, answered_all = _at(rows, t, "sample", n_all)
        if prec >= opts.target and (prec_all >= opts.target_all or answered_all == 0) and met is None:
            met = t
        if cov >= MIN_COVERAGE and (fallback is None or prec > fallback[1]):
            fallback = (t, prec)
    t = met if met is not None else (fallback[0] if fallback else 1.0)
    cov, prec, answered = _at(rows, t, "answerable", n_ans)
    cov_all, prec_all, answered_all = _at(rows, t, "sample", n_all)
    return t, {"met_targets": met is not None, "answerable": {"n": n_ans, "answered": answered,
                                                              "coverage": round(cov, 4), "precision": round(prec, 4)},
               "sample": {"n": n_all, "answered": answered_all, "coverage": round(cov_all, 4),
                          "precision": round(prec_all, 4)}}


# -- the job ----------------------------------------------------------------------------------------------------
def _records_record(spec: str, records, ids: set[str]) -> dict[str, Any]:
    from hqa.data import store
    from hqa.tracking.record import dataset_checksum

    used = [r.to_example() for r in records if str(r.id) in ids]
    try:
        files = {f.file: f.sha256 for f in store.dataset(spec.split(":")[0]).files}
    except Exception:  # noqa: BLE001 - a dataset the registry does not pin (a file, a derived set)
        files = {}
    return {"spec": spec, "n": len(used), "records_sha256": dataset_checksum(used), "files_sha256": files,
            "ids": sorted(ids, key=lambda i: (len(i), i))}


def arm_folder(tb, out: str | None) -> tuple[str, Path]:
    """(the arm, where it is written): ``--out``, else the folder :func:`hqa.answering.ranker.reranker_arm`
    reads it from."""
    arm, folder = learned.reranker_arm(tb.reranker)
    if out:
        return arm, Path(out).expanduser()
    if folder is None:
        raise ConfigError(f"no place for a learned ranker of the {arm} {tb.reranker.model_name or ''}: give --out")
    return arm, folder


def train(settings, opts: RankerOptions, say: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) \
        -> dict[str, Any]:
    """Train, calibrate, check and write one arm (see the module docstring); returns its metadata."""
    import lightgbm
    from hqa.io.files import write_atomic
    from hqa.optimize.compile import eval_specs
    from hqa.programs.simple import SimpleHybrid
    from hqa.toolbox import Toolbox

    opts.validate()
    start = time.monotonic()
    tb = Toolbox(settings)
    program = SimpleHybrid(toolbox=tb)
    arm, folder = arm_folder(tb, opts.out)
    cross = arm == "cross-encoder"
    cache = pools_cache(settings, tb.reranker)
    exclude = eval_specs()
    train_records, train_ans, _ = questions(opts.train, opts.train_limit, settings.pack_dir, exclude)
    dev_records, dev_ans, dev_sample = questions(opts.dev, opts.dev_limit, settings.pack_dir, exclude,
                                                 answerable_first=False)
    say(f"hqa train ranker: the {arm} arm on {len(train_records)} {opts.train} questions, calibrated on "
        f"{len(dev_records)} {opts.dev} questions; candidates cached in {cache}")
    train_pools = pools(program, train_records, train_ans, set(), cache, cross, say)
    dev_pools = pools(program, dev_records, dev_ans, dev_sample, cache, cross, say)
    features_s = time.monotonic() - start
    cv = cross_validate(train_pools, opts)
    say(f"top-1 in 5-fold cross-validation on {opts.train}: hand-set {cv['hand']:.3f}, learned {cv['learned']:.3f}")
    booster = fit_ranker(train_pools, opts)
    data = to_onnx(booster)
    x, _, _ = _groups(train_pools)
    meta_model = {"format": learned.FORMAT, "features": list(learned.FEATURES),
                  "model_sha256": hashlib.sha256(data).hexdigest()}
    folder.mkdir(parents=True, exist_ok=True)
    # checked and calibrated in a scratch folder beside it: a training that fails leaves the arm in use untouched
    with tempfile.TemporaryDirectory(prefix=".answer-ranker-", dir=folder) as scratch:
        write_atomic(Path(scratch) / learned.MODEL_FILE, data)
        write_atomic(Path(scratch) / learned.META_FILE,
                     json.dumps({**meta_model, "confidence": {"threshold": 1.0}}) + "\n")
        model = learned.RankerModel(Path(scratch))
        gap = float(np.max(np.abs(model.predict(x) - _Scores(booster).predict(x))))
        if not gap < 1e-3:
            raise ConfigError(f"the ONNX trees score {gap:.2g} away from LightGBM's: not written")
        conf = calibrate(model, dev_pools, opts)
        dev_learned = round(top1([p for p in dev_pools if p.answerable], model), 4)
    n_candidates = sum(len(p.labels) for p in train_pools)
    model_name = str(tb.reranker.model_name if cross else tb.reranker.embedder_key)
    meta = {**meta_model, "arm": arm, "reranker": {"kind": tb.reranker.kind, "model": model_name},
            "embedder": tb.embedder_name or "minilm", "confidence": conf,
            "lightgbm": {"version": lightgbm.__version__, "params": lgb_params(opts), "rounds": opts.rounds},
            "cross_validation_top1": cv,
            "dev_top1": {"hand": round(top1([p for p in dev_pools if p.answerable]), 4),
                         "learned": dev_learned},
            "trained_on": {**_records_record(opts.train, train_records, {p.id for p in train_pools}),
                           "groups": sum(any(p.labels) for p in train_pools), "candidates": n_candidates},
            "calibrated_on": _records_record(opts.dev, dev_records, {p.id for p in dev_pools}),
            "excluded": list(exclude), "pack_version": tb.manifest.get("version"),
            "options": {k: v for k, v in asdict(opts).items() if k not in ("out", "command")},
            "command": opts.command or "hqa train ranker", "seconds": {"candidates": round(features_s, 1),
                                                                       "total": round(time.monotonic() - start, 1)}}
    write_atomic(folder / learned.MODEL_FILE, data)  # the old metadata's checksum refuses it until the next line
    write_atomic(folder / learned.META_FILE, json.dumps(meta, indent=1) + "\n")
    say(f"wrote {folder / learned.MODEL_FILE} ({len(data) / 1e3:.0f} kB) and {learned.META_FILE}: threshold "
        f"{conf['threshold']:.3f}; dev answerable coverage {conf['dev']['answerable']['coverage']:.3f} at precision "
        f"{conf['dev']['answerable']['precision']:.3f}, dev sample coverage {conf['dev']['sample']['coverage']:.3f} at "
        f"precision {conf['dev']['sample']['precision']:.3f} ({meta['seconds']['total']:.0f} s)")
    return meta

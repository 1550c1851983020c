"""The learned answer ranker (hqa.answering.ranker) and its training (hqa.optimize.answer_ranker): the feature rows,
LightGBM's lambdarank turned into ONNX that scores as LightGBM does, an arm that ranks what the hand-set weights get
wrong, the files' checks, which arm fits which reranker, and the threshold chosen for the two precision targets."""

from __future__ import annotations

import hashlib
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from hqa.answering import ranker as learned
from hqa.answering import selective
from hqa.optimize import answer_ranker as ar
from hqa.retrievers.base import Evidence
from hqa.scoring.metrics import answer_recall


def _triple(s, p, o, score):
    return Evidence(text=f"{s} {p} {o}", source="triples", score=score,
                    meta={"s_label": s, "p_label": p, "o_label": o})


def _passage(title, text, score):
    return Evidence(text=text, source="text", score=score, meta={"title": title, "id": title})


def _question(i: int):
    """A question whose right answer comes from a low-scored KG fact while a high-scored passage offers a wrong name
    close to the question's words: the hand-set weights (the reranker's score weighs 4) put the wrong one first."""
    film, right, wrong = f"Film{i}", f"Rightname Person{i}", f"Wrongname Other{i}"
    evidence = [_passage(f"{film} (film)", f"{film} is a film produced by {wrong} in Paris.", 0.9),
                _triple(film, "director", right, 0.2)]
    return f"Who directed {film}?", evidence, [right]


def _pools(n: int) -> list[ar.Pool]:
    out = []
    for i in range(n):
        q, ev, gold = _question(i)
        f = learned.featurize(q, ev)
        out.append(ar.Pool(str(i), q, gold, True, f, [int(bool(answer_recall(c.text, gold))) for c in f.hand], ev,
                           i % 2 == 0))
    return out


def test_each_candidate_gets_one_row_of_every_feature_in_the_hand_set_order():
    q, ev, gold = _question(0)
    f = learned.featurize(q, ev)
    x = learned.feature_matrix(f)
    assert x.shape == (len(f.hand), len(learned.FEATURES)) and x.dtype == np.float32
    cols = {name: x[:, i] for i, name in enumerate(learned.FEATURES)}
    assert [c.text for c in f.hand][:1] != gold  # the hand-set ranking gets this one wrong
    assert list(cols["hand"]) == sorted(cols["hand"], reverse=True) and cols["hand_pos"][0] == 1.0
    right = [c.text for c in f.hand].index(gold[0])
    assert cols["kg"][right] == 1.0 and cols["triples"][right] == 1.0 and math.isnan(cols["sim"][right])
    assert cols["kg_rel"][right] == 1.0  # "directed" names the fact's relation
    assert cols["q_type"][0] == 0.0  # "who": a person (hqa.answering.selective.TYPES[0])
    assert np.isnan(cols["ce"]).all()  # no cross-encoder: missing, not zero
    scored = learned.featurize(q, ev, pair_scores=lambda query, texts: np.arange(len(texts), dtype=float))
    assert [v for v in learned.feature_matrix(scored)[:, learned.FEATURES.index("ce")]][:2] == [0.0, 1.0]


def _write_arm(folder, booster, pools, conf=None) -> learned.RankerModel:
    data = ar.to_onnx(booster)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / learned.MODEL_FILE).write_bytes(data)
    meta = {"format": learned.FORMAT, "features": list(learned.FEATURES), "arm": "bi-encoder",
            "model_sha256": hashlib.sha256(data).hexdigest(), "confidence": conf or {"threshold": 1.0}}
    (folder / learned.META_FILE).write_text(json.dumps(meta))
    return learned.RankerModel(folder)


def test_lambdarank_learns_the_order_the_hand_set_weights_miss_and_onnx_scores_it_as_lightgbm(tmp_path):
    pools = _pools(40)
    opts = ar.RankerOptions(rounds=20, leaves=4, min_child=5)
    booster = ar.fit_ranker(pools, opts)
    model = _write_arm(tmp_path / "arm", booster, pools)
    x, _, _ = ar._groups(pools)
    assert np.abs(model.predict(x) - booster.predict(x)).max() < 1e-4  # the shipped trees are LightGBM's
    assert ar.top1(pools) == 0.0 and ar.top1(pools, model) == 1.0
    q, ev, gold = _question(99)  # a question it never saw
    best = learned.ranked(model, learned.featurize(q, ev), max_candidates=3)
    assert best[0].text == gold[0] and len(best) <= 3
    assert best[0].kinds is not None and best[0].features["hand"] < max(c.features["hand"] for c in best)
    assert model.name.startswith("learned bi-encoder ") and "/" not in model.name


def test_an_arm_whose_files_do_not_match_is_refused_and_the_ranking_falls_back_by_hand(tmp_path):
    pools = _pools(12)
    folder = tmp_path / "arm"
    _write_arm(folder, ar.fit_ranker(pools, ar.RankerOptions(rounds=3, leaves=4, min_child=5)), pools)
    (folder / learned.MODEL_FILE).write_bytes((folder / learned.MODEL_FILE).read_bytes() + b"x")
    with pytest.raises(ValueError, match="checksum"):
        learned.RankerModel(folder)
    reranker = SimpleNamespace(kind="cross-encoder", model_name=str(folder))
    model, why = learned.for_reranker(reranker)
    assert model is None and "cannot be used" in why and "checksum" in why
    meta = json.loads((folder / learned.META_FILE).read_text())
    (folder / learned.META_FILE).write_text(json.dumps({**meta, "features": meta["features"][:-1]}))
    with pytest.raises(ValueError, match="another format"):
        learned.RankerModel(folder)


def test_each_reranker_is_ranked_by_the_arm_trained_with_it(tmp_path):
    bi = SimpleNamespace(kind="bi-encoder", model_name=None, embedder_key="minilm")
    assert learned.reranker_arm(bi) == ("bi-encoder", learned.shipped_dir())
    other = SimpleNamespace(kind="bi-encoder", model_name=None, embedder_key="contriever")
    assert learned.reranker_arm(other) == ("bi-encoder", None)
    assert learned.for_reranker(other) == (None, "no learned ranker for this bi-encoder")
    cross = SimpleNamespace(kind="cross-encoder", model_name=str(tmp_path))
    assert learned.reranker_arm(cross) == ("cross-encoder", tmp_path)
    model, why = learned.for_reranker(cross)  # the fine-tuned cross-encoder without its arm yet
    assert model is None and "hqa train ranker" in why
    hub = SimpleNamespace(kind="cross-encoder", model_name="cross-encoder/ms-marco-MiniLM-L-6-v2")
    assert learned.reranker_arm(hub) == ("cross-encoder", None)


def _rows(confs_right, answerable=True, sample=False):
    return [{"conf": c, "right": r, "answerable": answerable, "sample": sample, "fit": 1} for c, r in confs_right]


def test_the_threshold_answers_the_most_that_meets_both_precision_targets():
    opts = ar.RankerOptions(target=0.75, target_all=0.5)
    ans = _rows([(0.9, True), (0.8, True), (0.7, True), (0.6, False), (0.5, True), (0.4, False)])
    sample = _rows([(0.9, True), (0.8, False), (0.65, False), (0.3, False)], answerable=False, sample=True)
    dev = [SimpleNamespace(answerable=True, sample=False)] * 6 + [SimpleNamespace(answerable=False, sample=True)] * 4
    t, report = ar._threshold(ans + sample, dev, opts)
    # at 0.5 the answerable precision is 4/5 but the sample's 1/3 (0.9, 0.8, 0.65); at 0.7: 3/3 and 1/2
    assert t == 0.7 and report["met_targets"]
    assert report["answerable"] == {"n": 6, "answered": 3, "coverage": 0.5, "precision": 1.0}
    assert report["sample"]["precision"] == 0.5
    wrong_first = _rows([(0.95, False), (0.9, True)], answerable=False, sample=True)  # the sample never reaches 0.99
    t, report = ar._threshold(ans + wrong_first, dev, ar.RankerOptions(target=0.99, target_all=0.99))
    # unmet: the best answerable precision at a coverage of at least 0.2, the lowest such threshold (0.7 and 0.8
    # both answer 2-3 of 6 rightly; 0.9 answers 1 of 6, too few)
    assert not report["met_targets"] and t == 0.7


class _ScoredReranker:
    """The bi-encoder on the packaged MiniLM as the learned ranker sees it (its arm is read from ``shipped_dir``),
    keeping the retrievers' order and scores."""

    kind, model_name, embedder_key = "bi-encoder", None, "minilm"

    def rerank(self, query, items, k=None):
        return sorted(items, key=lambda e: -float(e.score or 0.0))[:k]


def _simple_toolbox(settings_for, n: int):
    """A toolbox whose text and triple retrievers serve :func:`_question`'s evidence for each of ``n`` films."""
    from hqa.toolbox import Toolbox

    by_film = {f"Film{i}": _question(i) for i in range(n)}

    def source(which):
        def retrieve(query, k=5):
            film = next((f for f in by_film if f"{f}?" in query), None)
            return [e for e in by_film[film][1] if e.source == which][:k] if film else []
        return retrieve

    settings = settings_for(programs_answer_mode="grounded", programs_abstain="off")
    return Toolbox(settings, dense=source("text"), bm25=source("triples"), reranker=_ScoredReranker()), by_film


def test_simple_answers_what_the_learned_arm_ranks_first_and_abstains_by_its_calibration(settings_for, tmp_path,
                                                                                         monkeypatch):
    """Trained through the program's own hop and features (:func:`hqa.optimize.answer_ranker.pools`), the arm makes
    ``simple`` answer the right name the hand-set weights rank second; the trace names the arm, and the selective
    decision reads the arm's calibrated threshold, not the hand-set one."""
    from hqa.programs.simple import SimpleHybrid

    toolbox, by_film = _simple_toolbox(settings_for, 21)
    program = SimpleHybrid(toolbox=toolbox, memory="fallback")
    records = [SimpleNamespace(id=str(i), question=by_film[f"Film{i}"][0], answers=by_film[f"Film{i}"][2])
               for i in range(20)]
    data = ar.pools(program, records, {r.id for r in records}, set(), None)
    assert ar.top1(data) == 0.0  # the hand-set weights answer the wrong name for every one
    booster = ar.fit_ranker(data, ar.RankerOptions(rounds=20, leaves=4, min_child=5))
    names = list(selective.FEATURES)
    conf = {"features": names, "weights": [0.0] * len(names), "bias": 0.0, "mean": [0.0] * len(names),
            "std": [1.0] * len(names), "threshold": 0.4}  # confidence 0.5 for every answer
    _write_arm(tmp_path / "arm", booster, data, conf)
    monkeypatch.setattr(learned, "shipped_dir", lambda: tmp_path / "arm")
    question, _, gold = by_film["Film20"]  # not trained on
    hand = SimpleHybrid(toolbox=toolbox, memory="fallback", ranker="hand")(question=question)
    assert hand.answer != gold[0] and hand.trace["ranker"] == "hand"
    pred = SimpleHybrid(toolbox=toolbox, memory="fallback", ranker="learned")(question=question)
    assert pred.answer == gold[0] and pred.trace["ranker"].startswith("learned bi-encoder ")
    asked = SimpleHybrid(toolbox=toolbox, memory="fallback", ranker="learned", abstain="on")(question=question)
    assert not asked.abstained and asked.confidence == pytest.approx(0.5)
    assert asked.trace["selective"]["ranker"] == "learned"
    (tmp_path / "arm" / learned.META_FILE).write_text(json.dumps(
        {**json.loads((tmp_path / "arm" / learned.META_FILE).read_text()), "confidence": {**conf, "threshold": 0.6}}))
    shy = SimpleHybrid(toolbox=toolbox, memory="fallback", ranker="learned", abstain="on")(question=question)
    assert shy.abstained and "threshold" in shy.reason
    # the papers' programs: the hand-set ranking of each source's candidates unless the ablation asks for the arm
    from hqa.answering.merge import SourceMerge
    from hqa.programs.humaniq import HumanIQAgent

    assert HumanIQAgent(toolbox=toolbox).sources.ranker == "hand"
    assert HumanIQAgent(toolbox=toolbox, ranker="learned").sources.ranker == "learned"
    evidence = by_film["Film20"][1]
    out, part = SourceMerge(1, "grounded", ranker="learned").ground(question, {"text": None}, {"text": evidence},
                                                                    toolbox)
    assert out["text"] == gold[0] and part.ranker.startswith("learned bi-encoder ")
    out, part = SourceMerge(1, "grounded").ground(question, {"text": None}, {"text": evidence}, toolbox)
    assert out["text"] != gold[0] and not part.ranker  # the default's trace names no ranking


def test_training_questions_leave_out_every_question_an_evaluation_set_holds(monkeypatch, tmp_path):
    """A training question is dropped when an excluded set holds it by id or by its text however spelled; the
    answerable ones are all kept and the rest evenly spaced (the calibration split keeps its own spec's records)."""
    from hqa.data import datasets
    from hqa.optimize import compile as compiling

    def rec(i, q):
        return SimpleNamespace(id=f"compmix:{i}", question=q, answers=("x",))

    train = [rec(i, f"Question number {i}?") for i in range(20)]
    held = [rec(3, "something else"), rec(99, "question NUMBER 7")]  # id 3, and the text of 7
    sets = {"compmix/train": train, "compmix/train:answerable": train[:4], "qald10": held,
            "compmix/dev": [rec(5, "Question number 5?")], "compmix/dev:answerable": []}
    monkeypatch.setattr(datasets, "load_dataset", lambda spec, pack_dir=None: sets[spec])
    monkeypatch.setattr(compiling, "excluded_questions", lambda specs: [r for s in specs for r in sets[s]])
    records, answerable, _ = ar.questions("compmix/train", 10, tmp_path, ("qald10", "compmix/dev"))
    ids = [r.id for r in records]
    assert not {"compmix:3", "compmix:5", "compmix:7"} & set(ids)
    assert {"compmix:0", "compmix:1", "compmix:2"} <= set(ids) and len(ids) == 10
    own, _, _ = ar.questions("compmix/dev", None, tmp_path, ("compmix/dev", "qald10"))  # dev is not held from itself
    assert [r.id for r in own] == ["compmix:5"]


def test_a_training_limit_below_the_answerable_questions_takes_them_evenly_spaced(monkeypatch, tmp_path):
    from hqa.data import datasets
    from hqa.optimize import compile as compiling

    train = [SimpleNamespace(id=f"compmix:{i}", question=f"Question {i}?", answers=("x",)) for i in range(20)]
    sets = {"compmix/train": train, "compmix/train:answerable": train[:10]}
    monkeypatch.setattr(datasets, "load_dataset", lambda spec, pack_dir=None: sets[spec])
    monkeypatch.setattr(compiling, "excluded_questions", lambda specs: [])
    records, _, _ = ar.questions("compmix/train", 5, tmp_path)
    assert [r.id for r in records] == [f"compmix:{i}" for i in (0, 2, 4, 6, 8)]


def test_cached_candidates_of_a_cross_encoder_trained_again_in_its_folder_are_not_read(tmp_path):
    """The candidates cache is keyed by the cross-encoder's weights, not only its folder: ``hqa train reranker``
    writes every model to the same place, and the old model's hops must not train the new model's arm."""
    folder = tmp_path / "cross-encoder"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"w" * 10)
    (folder / "hqa-reranker.json").write_text('{"seconds": {"training": 1}}')
    ce = SimpleNamespace(kind="cross-encoder", model_name=str(folder), embedder_key="minilm")
    first = ar.reranker_key(ce)
    assert first == ar.reranker_key(ce)  # the same weights: the same candidates
    (folder / "hqa-reranker.json").write_text('{"seconds": {"training": 2}}')  # trained again, same folder
    assert ar.reranker_key(ce) != first
    (folder / "hqa-reranker.json").write_text('{"seconds": {"training": 1}}')
    assert ar.reranker_key(ce) == first
    (folder / learned.META_FILE).write_text('{"arm": "cross-encoder"}')  # its arm, trained beside it
    (folder / learned.MODEL_FILE).write_bytes(b"trees")
    assert ar.reranker_key(ce) == first
    (folder / "model.safetensors").write_bytes(b"w" * 11)
    assert ar.reranker_key(ce) != first
    bi = SimpleNamespace(kind="bi-encoder", model_name=None, embedder_key="minilm")
    assert ar.reranker_key(bi) == "minilm"
    settings = SimpleNamespace(pack_dir=tmp_path, artifacts_dir=tmp_path / "artifacts")
    (tmp_path / "manifest.json").write_text('{"version": "v1"}')
    assert ar.pools_cache(settings, ce).name.startswith("pools-cross-encoder-")
    assert ar.pools_cache(settings, bi).name.startswith("pools-bi-encoder-")
    assert ar.pools_cache(settings, ce) != ar.pools_cache(settings, bi)

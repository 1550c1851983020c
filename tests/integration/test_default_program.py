"""The compiled default program shipped in the package (hqa/data/default_program, built by scripts/compile-default):
what it was compiled on, that no evaluation question reached its demos, and that every entry point uses it unless
told otherwise."""

from __future__ import annotations

import json

import pytest

from hqa.app import DEFAULT_PROGRAM_DIR, default_program_dir, open_program
from hqa.data.datasets import EVAL_SETS, load_dataset, question_key
from hqa.artifacts.store import load_program


@pytest.fixture(scope="module")
def shipped():
    assert default_program_dir() == DEFAULT_PROGRAM_DIR, "hqa/data/default_program is missing: scripts/compile-default"
    manifest = json.loads((DEFAULT_PROGRAM_DIR / "manifest.json").read_text())
    state = json.loads((DEFAULT_PROGRAM_DIR / "program.json").read_text())
    return manifest, state


def demo_questions(state: dict) -> list[str]:
    return [d["question"] for name, entry in state.items() if isinstance(entry, dict) and "demos" in entry
            for d in entry["demos"] if "question" in d]


def test_compiled_with_the_projects_optimizer_on_train_questions_of_the_offline_world(shipped):
    manifest, state = shipped
    assert (manifest["program"], manifest["optimizer"]) == ("simple", "bootstrap")
    assert manifest["data"]["train"] == "compmix/train:answerable" and manifest["data"]["dev"] == "compmix/dev:answerable"
    assert set(EVAL_SETS) <= set(manifest["data"]["excluded"])
    shown = demo_questions(state)
    assert shown, "no demos: nothing was compiled"
    train = {question_key(r.question) for r in load_dataset("compmix/train")}
    assert all(question_key(q) in train for q in shown)


def test_no_evaluation_question_reaches_a_demo(shipped):
    _, state = shipped
    shown = {question_key(q) for q in demo_questions(state)}
    for spec in EVAL_SETS:
        leaked = sorted(shown & {question_key(r.question) for r in load_dataset(spec)})
        assert not leaked, f"{spec} questions among the shipped demos: {leaked}"


@pytest.fixture(scope="module")
def default_pack(tmp_path_factory):
    """The pack as `hqa pack build` builds it, with the installed Wikipedia leads (the session's pack keeps to the
    recorded sources): the one the shipped program was compiled on."""
    from hqa.world.pack import build_pack

    artifacts = tmp_path_factory.mktemp("default-artifacts")
    build_pack(artifacts / "pack")
    return artifacts


def test_entry_points_load_it_unless_told_otherwise(default_pack, shipped):
    from pathlib import Path

    from hqa.config import load_settings

    _, state = shipped
    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(default_pack))
    opened = open_program(settings, configure=False)
    assert (opened.label, opened.kind, opened.source) == ("default", "simple", str(DEFAULT_PROGRAM_DIR))
    assert opened.warnings == []  # same pack, LM, embedder and reranker as it was compiled with
    loaded = {name: p.dump_state()["demos"] for name, p in opened.program.named_predictors()}
    assert loaded == {name: entry["demos"] for name, entry in state.items() if name in loaded}
    assert open_program(settings, program="simple", configure=False).label == "simple"  # told otherwise
    program, _ = load_program(DEFAULT_PROGRAM_DIR, settings)
    assert type(program).__name__ == "SimpleHybrid"


# -- the learned answer ranker it ranks with (hqa/data/ranker, written by hqa train ranker) -----------------------
@pytest.fixture(scope="module")
def ranker_meta():
    from hqa.answering.ranker import META_FILE, shipped_dir

    return json.loads((shipped_dir() / META_FILE).read_text())


def test_the_shipped_ranker_never_saw_an_evaluation_question(ranker_meta):
    """Its training questions are compmix/train ones, none of them (by id or by text) in any evaluation set or
    split; its calibration questions are compmix/dev ones, none of them in any other evaluation set."""
    from hqa.optimize.compile import eval_specs

    trained, calibrated = ranker_meta["trained_on"], ranker_meta["calibrated_on"]
    assert trained["spec"] == "compmix/train" and calibrated["spec"] == "compmix/dev"
    assert trained["n"] == len(trained["ids"]) >= 1000 and calibrated["n"] == len(calibrated["ids"]) >= 300
    assert set(eval_specs()) <= set(ranker_meta["excluded"])
    train = {str(r.id): question_key(r.question) for r in load_dataset("compmix/train")}
    dev = {str(r.id): question_key(r.question) for r in load_dataset("compmix/dev")}
    assert set(trained["ids"]) <= set(train) and set(calibrated["ids"]) <= set(dev)
    train_keys = {train[i] for i in trained["ids"]}
    dev_keys = {dev[i] for i in calibrated["ids"]}
    for spec in (*EVAL_SETS, "compmix/dev", "compmix/test"):
        records = load_dataset(spec)
        ids, keys = {str(r.id) for r in records}, {question_key(r.question) for r in records}
        assert not set(trained["ids"]) & ids and not train_keys & keys, f"{spec} questions in the ranker's training"
        if spec.split(":")[0] != "compmix/dev":
            assert not set(calibrated["ids"]) & ids and not dev_keys & keys, f"{spec} questions in its calibration"


def test_the_shipped_ranker_says_how_it_was_built_and_its_trees_match(ranker_meta):
    """Small, versioned with the checksums of the data it learned from and the command that rebuilds it; the
    program opens it (a changed file is refused: tests/unit/answering/test_ranker.py)."""
    import hashlib

    from hqa.answering.ranker import MODEL_FILE, load_model, shipped_dir
    from hqa.data import store

    data = (shipped_dir() / MODEL_FILE).read_bytes()
    assert len(data) < 1_000_000 and hashlib.sha256(data).hexdigest() == ranker_meta["model_sha256"]
    assert ranker_meta["command"].startswith("hqa train ranker")
    files = {f.file: f.sha256 for f in store.dataset("compmix/train").files}
    assert ranker_meta["trained_on"]["files_sha256"] == files and ranker_meta["trained_on"]["records_sha256"]
    assert load_model(shipped_dir()).name.startswith("learned bi-encoder ")

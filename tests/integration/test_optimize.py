"""Compile → save → load → same predictions; artifacts refuse corruption; MLflow contents; compare outputs."""

import json
from pathlib import Path

import dspy
import pytest
from compilekit import opts
from conftest import DemoSensitiveLM, fake_dense
from dspy.utils import DummyLM

from hqa.data.datasets import load_examples
from hqa.errors import ArtifactError
from hqa.artifacts.store import load_program, manifest_checksum, read_artifact_manifest, save_artifact
from hqa.jobs.compare import compare
from hqa.jobs.compile import compile_and_save
from hqa.toolbox import Toolbox


@pytest.fixture()
def settings(settings_for, tmp_path):
    return settings_for(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")


def test_compile_save_load_identical_predictions(settings, monkeypatch):
    """The loaded program answers every dev question as the compiled one did before saving (its predictions file),
    with the LM's reply depending on the demos; a program without its demos answers otherwise."""
    import mlflow

    from hqa.schemas.run_folder import read_rows
    from hqa.scoring.metrics import METRICS

    monkeypatch.setitem(METRICS, "always", lambda example, pred, trace=None: True)
    lm = DemoSensitiveLM(chain=False)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        result = compile_and_save(settings, opts(metric="always"), name="cb-boot")
        art = Path(result["artifact"])
        manifest = read_artifact_manifest(art)
        assert manifest["program"] == "closedbook" and manifest["optimizer"] == "bootstrap"
        assert manifest["data"]["dev_n"] == 3
        before = {r["question"]: r["answer"] for r in read_rows(Path(result["predictions"]))}
        assert len(before) == 3
        program, _ = load_program(art, settings)
        demos = program.generate.demos
        assert len(demos) == 2 and all(d.get("answer", "").startswith("d") for d in demos)  # bootstrapped traces
        assert {q: program(question=q).answer for q in before} == before
        program.generate.demos = demos[:1]
        assert all(program(question=q).answer != a for q, a in before.items())

    run = mlflow.get_run(result["run_id"])
    assert run.data.params["optimizer"] == "bootstrap" and run.data.params["program"] == "closedbook"
    assert run.data.metrics["dev_n"] == 3
    assert run.data.metrics["dev_lm_calls_per_q"] == 1.0
    files = {f.path for f in mlflow.MlflowClient().list_artifacts(result["run_id"], "program")}
    assert {"program/program.json", "program/manifest.json"} <= files
    assert result["log_model"] == "ok"


@pytest.fixture()
def constructions(monkeypatch) -> list[tuple[str, dict]]:
    """Every ClosedBook constructed (a deep copy constructs nothing): ("schema", kwargs) when the MLflow model's
    parameter schema describes a saved artifact (hqa.optimize.mlflow_model.param_schema: the program as its manifest
    states it, no toolbox, never run), else ("job", kwargs)."""
    import functools
    import sys

    from hqa.programs.closedbook import ClosedBook

    built: list[tuple[str, dict]] = []
    real = ClosedBook.__init__

    @functools.wraps(real)
    def counted(self, *args, **kwargs):
        frame, callers = sys._getframe(1), set()
        while frame is not None:
            callers.add(frame.f_code.co_name)
            frame = frame.f_back
        built.append(("schema" if "param_schema" in callers else "job", kwargs))
        real(self, *args, **kwargs)

    monkeypatch.setattr(ClosedBook, "__init__", counted)
    return built


def test_the_compile_job_builds_its_student_once(settings, constructions, monkeypatch):
    """The program opened with its toolbox (hqa.app.open_program) is the student the optimizer compiles, the
    estimate's dry run runs a copy of and the predictor count reads: one construction in the job."""
    from hqa.scoring.metrics import METRICS

    monkeypatch.setitem(METRICS, "always", lambda example, pred, trace=None: True)
    seen = []
    with dspy.context(lm=DemoSensitiveLM(chain=False), adapter=dspy.ChatAdapter()):
        result = compile_and_save(settings, opts(metric="always"), name="cb-once",
                                  estimate=lambda *a, **kw: seen.append(a))
    assert len(seen) == 1 and result["log_model"] == "ok"
    assert constructions == [("job", {"cot": False}), ("schema", {"cot": False})]


def test_the_compare_job_builds_one_student_for_its_arms_and_one_per_varied_value(settings, constructions,
                                                                                    tmp_path):
    """Every arm compiles a copy of the one opened student; ``--vary`` opens one more per value (its arguments),
    through the same path, shared by the optimizers crossed with it."""
    with dspy.context(lm=DemoSensitiveLM(chain=False), adapter=dspy.ChatAdapter()):
        out = compare(settings, opts(optimizer="none", metric="em", dev_limit=2), arms=("none", "bootstrap"),
                      out_dir=tmp_path / "cmp", estimate=lambda *a, **kw: None)
        assert [r["arm"] for r in out["rows"]] == ["none", "bootstrap"]
        assert constructions == [("job", {"cot": False})]
        constructions.clear()
        out = compare(settings, opts(optimizer="none", metric="em", dev_limit=2), arms=("none", "bootstrap"),
                      out_dir=tmp_path / "vary", variants=(("none", {"demos": "none"}), ("sscot", {"demos": "sscot"})))
    assert [r["arm"] for r in out["rows"]] == ["none:none", "none:sscot", "bootstrap:none", "bootstrap:sscot"]
    assert constructions == [("job", {"cot": False}), ("job", {"cot": False, "demos": "none"}),
                             ("job", {"cot": False, "demos": "sscot"})]


def test_corrupt_or_mismatched_artifact_is_refused(settings, tmp_path):
    from hqa.programs.closedbook import ClosedBook

    art = save_artifact(ClosedBook(), tmp_path / "cb", {"program": "closedbook", "program_kwargs": {}})
    load_program(art, settings)  # sound
    original = (art / "program.json").read_text()
    (art / "program.json").write_text(original.replace("{", "{ ", 1))
    with pytest.raises(ArtifactError, match="checksum"):
        load_program(art, settings)
    (art / "program.json").write_text(original)
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["versions"]["dspy"] = "2.0.0"
    (art / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="manifest.json does not match its checksum"):  # an edit
        load_program(art, settings)
    manifest["manifest_sha256"] = manifest_checksum(manifest)  # as an hqa with dspy 2.0.0 would have sealed it
    (art / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="dspy 2.0.0"):
        load_program(art, settings)
    (art / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="corrupt"):
        load_program(art, settings)
    with pytest.raises(ArtifactError, match="no compiled program"):
        load_program(tmp_path / "missing", settings)


def test_state_of_another_program_is_refused(settings, tmp_path):
    from hqa.programs.simple import SimpleHybrid

    art = save_artifact(SimpleHybrid(), tmp_path / "simple", {"program": "closedbook", "program_kwargs": {}})
    with pytest.raises(ArtifactError, match="does not fit"):
        load_program(art, settings)


def test_dpp_human_artifact_reloads_with_same_demo_choice(settings):
    tb = Toolbox(settings, dense=fake_dense)
    finish = {"next_thought": "done", "next_tool_name": "Finish",
              "next_tool_args": "Wikipedia_Answer: X, Wikidata_Answer: [X]"}
    lm = DummyLM([finish, {"answer": "X"}, {"answer": "X"}] * 20)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        result = compile_and_save(settings, opts(program="hqa", optimizer="dpp-human", dev_limit=2, metric="recall"),
                                  name="hqa-dpp")
        program, manifest = load_program(result["artifact"], settings, tb)
        assert manifest["wrapper"] == "dpp"
        q = "Who directed the movie Titanic?"
        first = program(question=q)
        again, _ = load_program(result["artifact"], settings, tb)
        assert again(question=q).selected_demos == first.selected_demos and len(first.selected_demos) == 3
        # the merge predictor keeps its fixed human merge demos, marked as human
        merge_demos = program.program.sources.merge.demos
        assert merge_demos and all(d.get("source") == "human" for d in merge_demos)


def test_compare_writes_table_csv_plot_and_nested_runs(settings, tmp_path):
    """Each arm runs its own compiled program: with a demo-sensitive LM the zero-shot and bootstrap arms answer
    differently, and every arm's rows reach its own file and child run."""
    import mlflow

    from hqa.schemas.run_folder import read_rows

    train = {ex.question: ex.answers[0] for ex in load_examples("compmix/dev", 6)}
    lm = DemoSensitiveLM(chain=False, known=train)  # bootstrapping succeeds on train, dev answers are digests
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        out = compare(settings, opts(optimizer="none"), arms=("none", "bootstrap"), out_dir=tmp_path / "cmp")
    assert [r["arm"] for r in out["rows"]] == ["none", "bootstrap"]
    arms = {arm: {r["id"]: r["answer"] for r in read_rows(tmp_path / "cmp" / f"{arm}.jsonl")}
            for arm in ("none", "bootstrap")}
    assert len(arms["none"]) == 3 and arms["none"].keys() == arms["bootstrap"].keys()
    assert all(arms["none"][i] != arms["bootstrap"][i] for i in arms["none"])  # the arms are not the same program
    assert [r["em"] for r in out["rows"]] == [0.0, 0.0]
    table = Path(out["table"]).read_text()
    assert "| none |" in table and "| bootstrap |" in table and "lm_calls_per_q" in table
    assert Path(out["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(Path(out["csv"]).read_text().strip().splitlines()) == 3
    children = mlflow.search_runs(filter_string=f"tags.mlflow.parentRunId = '{out['run_id']}'",
                                  search_all_experiments=True)
    assert sorted(children["tags.mlflow.runName"]) == ["closedbook:bootstrap", "closedbook:none"]


@pytest.mark.real_lm
def test_real_lm_compile_small(settings):
    from hqa.app import configure_dspy

    lm = configure_dspy(settings)
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        result = compile_and_save(settings, opts(train_limit=3, dev_limit=2, metric="recall"), name="real-small")
    manifest = read_artifact_manifest(Path(result["artifact"]))
    assert manifest["data"]["dev_n"] == 2 and set(manifest["metrics"]) == {"em", "f1", "recall", "hits1"}
    assert manifest["cost"]["lm_calls"] >= 1




@pytest.mark.parametrize("where", ["compiling", "evaluating", "logging", "renaming"])
def test_an_interrupt_anywhere_in_compile_force_leaves_the_old_program_as_it_was(settings, monkeypatch, where):
    """Ctrl-C at each stage of ``hqa compile --force``: the program saved under the name before stays byte for byte,
    and nothing half-written is left beside it.  The program was saved before its MLflow model was logged (seconds of
    copying), so an interrupt there had replaced it; one between the two renames that put it in place lost both."""
    import os

    import hqa.jobs.compile as job
    import hqa.jobs.evaluate
    import hqa.optimize.mlflow_model

    from hqa.programs.closedbook import ClosedBook

    target = save_artifact(ClosedBook(), settings.artifacts_dir / "programs" / f"cb-{where}",
                           {"program": "closedbook", "program_kwargs": {}})
    before = {p.name: p.read_bytes() for p in target.iterdir()}

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    if where == "compiling":
        monkeypatch.setattr(job, "compile_program", ctrl_c)
    elif where == "evaluating":
        monkeypatch.setattr(hqa.jobs.evaluate, "evaluate", ctrl_c)
    elif where == "logging":
        monkeypatch.setattr(hqa.optimize.mlflow_model, "log_model", ctrl_c)
    else:
        real, hit = os.replace, []

        def rename(src, dst, *args, **kwargs):  # Ctrl-C as the new folder is about to take the name
            if Path(dst) == target and not hit:
                hit.append(src)
                raise KeyboardInterrupt
            return real(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, "replace", rename)
    with dspy.context(lm=DemoSensitiveLM(chain=False), adapter=dspy.ChatAdapter()):
        with pytest.raises(KeyboardInterrupt):
            compile_and_save(settings, opts(optimizer="none", seed=1), name=target.name, force=True)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert [p.name for p in target.parent.iterdir() if target.name in p.name] == [target.name]  # nothing staged left

"""Every run records what actually ran (hqa.tracking.record): the reranker that scored (the bi-encoder when the cross-encoder
cannot be loaded), the LM, git commit, library versions, seeds, datasets and demos; the compiled program's manifest,
the MLflow run's parameters and tags and ``hqa runs`` agree.  A compile never overwrites a saved program unasked,
and logging the MLflow model never runs the program."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import dspy
import mlflow
import pytest
from dspy.utils import DummyLM

from hqa.errors import ArtifactError
from hqa.optimize.compile import CompileOptions
from hqa.jobs.compile import compile_and_save
from hqa.retrievers import rerank


@pytest.fixture()
def unloadable(monkeypatch):
    """Every cross-encoder fails to load, as on a machine without the model (this process forgets earlier tries)."""
    monkeypatch.setattr(rerank, "_LOADED", {})
    monkeypatch.setattr(rerank, "_FAILED", {})
    monkeypatch.setattr(rerank, "_WARNED", set())

    def fail(name):
        raise OSError(f"no model {name} here")

    monkeypatch.setattr(rerank, "_load_cross_encoder", fail)


@pytest.fixture()
def settings(settings_for, tmp_path):
    s = settings_for(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    s.paths.artifacts = str(tmp_path / "artifacts")  # programs saved here, the session pack linked in
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "pack").symlink_to(Path(settings_for().artifacts_dir) / "pack")
    return s


def _compile(settings, **kw):
    opts = CompileOptions(program="simple", optimizer="none", train="compmix/dev", dev="humaniq-compmix",
                          train_limit=3, dev_limit=2, metric="em")
    with dspy.context(lm=DummyLM([{"answer": "X"}] * 10), adapter=dspy.ChatAdapter()):
        return compile_and_save(settings, opts, name="simple-rec", **kw)


def test_record_names_the_fallback_and_manifest_mlflow_and_runs_agree(settings, unloadable, capsys, monkeypatch):
    from hqa.cli import args as cli_args, entry as cli
    from hqa.artifacts.store import read_artifact_manifest

    result = _compile(settings, evaluate_dev=False)
    record = read_artifact_manifest(Path(result["artifact"]))["record"]
    parts = record["parts"]
    assert parts["reranker"] == "bi-encoder" and parts["reranker_model"] == "minilm"
    assert "not loadable" in parts["reranker_fallback"] and parts["reranker_configured"] == "auto"
    assert parts["sparql"] == "oxigraph" and parts["world"] == "pack" and parts["world_version"]
    assert parts["passage_embedder"] == "minilm-int8"  # models.passage_embedder auto: the pack's int8 passages
    assert parts["stored_vectors"] == 0  # no set-up store in this artifacts folder: a hop embeds the pack's texts
    assert record["lm"]["provider"] == "local" and record["lm"]["quantisation"] == "Q4_1"
    assert record["git"]["commit"] and isinstance(record["git"]["dirty"], bool)
    assert record["versions"]["dspy"] and record["versions"]["mlflow"]
    assert record["seeds"] == {"lm": 0, "compile": 0}
    assert record["datasets"]["train"]["name"] == "compmix" and record["datasets"]["train"]["split"] == "dev"
    assert record["datasets"]["train"]["n"] == 3 and len(record["datasets"]["train"]["sha256"]) == 16
    assert "dev" not in record["datasets"]  # --no-eval: no dev evaluation ran
    assert set(record["demos"]) >= {"parametric", "answer", "choose"}

    run = mlflow.get_run(result["run_id"])
    params, tags = run.data.params, run.data.tags
    assert params["record.parts.reranker"] == "bi-encoder" and tags["hqa.reranker"] == "bi-encoder"
    assert params["record.git.commit"] == record["git"]["commit"]
    assert tags["hqa.git_commit"].startswith(record["git"]["commit"])
    assert params["record.lm.quantisation"] == "Q4_1" and tags["hqa.lm"] == "local:SmolLM2-135M-Instruct.Q4_1.gguf Q4_1"
    assert "dev_limit" not in params and params["evaluate_dev"] == "False"  # --no-eval logs no dev size
    assert json.loads(Path(mlflow.artifacts.download_artifacts(run_id=result["run_id"],
                                                               artifact_path="record.json")).read_text()) == record

    monkeypatch.setattr(cli_args, "settings", lambda args: settings)
    assert cli.main(["runs", "--json"]) == 0
    listed = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}[result["run_id"]]
    assert listed["job"] == "compile" and listed["record"]["hqa.reranker"] == "bi-encoder"
    assert cli.main(["runs"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if result["run_id"][:8] in x)
    assert "compile" in line and "reranker=bi-encoder" in line and record["git"]["commit"][:7] in line


def test_evaluate_runs_are_listed_with_their_headline_metrics(settings, unloadable, capsys, monkeypatch, tmp_path):
    from hqa.cli import args as cli_args, entry as cli

    monkeypatch.setattr(cli_args, "settings", lambda args: settings)
    with dspy.context(lm=DummyLM([{"answer": "X"}] * 10), adapter=dspy.ChatAdapter()):
        import hqa.app

        real = hqa.app.open_program
        monkeypatch.setattr(hqa.app, "open_program", lambda *a, **k: real(*a, **{**k, "configure": False}))
        assert cli.main(["evaluate", "--program", "closedbook", "--dataset", "humaniq-compmix", "--limit", "2",
                         "--out", str(tmp_path / "ev")]) == 0
    capsys.readouterr()
    assert cli.main(["runs"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "evaluate:" in x)
    assert "evaluate" in line and "eval_recall=" in line and "eval_n=2" in line


def test_compile_into_an_existing_folder_refuses_unless_forced(settings, unloadable):
    first = _compile(settings, evaluate_dev=False)
    before = (Path(first["artifact"]) / "manifest.json").read_text()
    with pytest.raises(ArtifactError) as refused:
        _compile(settings, evaluate_dev=False)
    message = str(refused.value)
    assert "\n" not in message and "--force" in message and "already holds a compiled program" in message
    assert (Path(first["artifact"]) / "manifest.json").read_text() == before  # untouched
    again = _compile(settings, evaluate_dev=False, force=True)
    assert again["run_id"] != first["run_id"]
    assert (Path(again["artifact"]) / "manifest.json").read_text() != before


def test_default_reranker_falls_back_silently_a_named_one_is_said_once(settings_for, unloadable, caplog):
    from hqa.tracking.record import parts_record
    from hqa.toolbox import Toolbox

    caplog.set_level(logging.WARNING, logger="hqa")
    auto = Toolbox(settings_for())
    assert auto.reranker.kind == "bi-encoder" and caplog.records == []  # the default: no word
    assert parts_record(auto, auto.settings)["reranker"] == "bi-encoder"
    for _ in range(2):  # two toolboxes of one process, one explicitly configured model
        named = Toolbox(settings_for(models_reranker="my-org/my-cross-encoder"))
        assert named.reranker.kind == "bi-encoder"
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "my-org/my-cross-encoder" in said[0]
    assert "my-org/my-cross-encoder" in parts_record(named, named.settings)["reranker_fallback"]


def test_logging_the_mlflow_model_never_runs_the_program(settings, monkeypatch):
    import hqa.app
    from hqa.artifacts.store import save_artifact
    from hqa.optimize import mlflow_model
    from hqa.tracking import registry as tracking
    from hqa.programs.closedbook import ClosedBook

    opened = []

    def refuse(*args, **kwargs):  # MLflow's serving check would swallow the exception: the call is recorded too
        opened.append(args)
        raise AssertionError("logging the model opened (and would run) the program")

    monkeypatch.setattr(hqa.app, "open_program", refuse)
    dest = save_artifact(ClosedBook(), Path(settings.artifacts_dir) / "programs" / "cb-log",
                         {"program": "closedbook", "program_kwargs": {}})
    with tracking.run(settings, "compile:cb-log") as run:
        assert mlflow_model.log_program(dest, settings=settings) is None
    uri = mlflow.get_run(run.info.run_id).data.tags["model_uri"]
    local = Path(mlflow.artifacts.download_artifacts(uri))
    assert json.loads((local / "input_example.json").read_text())  # the example is stored all the same
    assert opened == []


def test_record_counts_the_stored_vectors_a_run_reads(settings_for, tmp_path):
    """A toolbox whose memo reads stored vectors says how many texts they hold."""
    from hqa.retrievers.embedding.memo import VectorMemo
    from hqa.retrievers.embedding.stored import StoredVectors
    from hqa.toolbox import Toolbox
    from hqa.tracking.record import parts_record

    store = StoredVectors.build(tmp_path, None, ["Vienna country Austria", "Danube: river in Europe"])
    settings = settings_for(models_reranker="")
    assert parts_record(Toolbox(settings, vector_memo=VectorMemo(None, stored=store)), settings)["stored_vectors"] == 2

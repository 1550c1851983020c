"""MLflow registry aliases against a real ``mlflow server`` on 127.0.0.1: ``hqa compile --register NAME --alias
ALIAS``, ``hqa registry alias NAME VERSION ALIAS``, and ``models:/NAME@ALIAS`` opened by ``hqa.load``,
``open_program`` (what ask / evaluate / batch / serve call) and by ``hqa batch`` / ``hqa serve`` processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dspy
import httpx
import mlflow
import pytest
from prockit import clean_env
from standins.servers import stop

from hqa.app import open_program
from hqa.errors import ArtifactError
from hqa.optimize import mlflow_model
from hqa.tracking import registry as tracking
from hqa.artifacts.store import save_artifact
from hqa.programs.closedbook import ClosedBook
from standins.servers import free_port, wait_port

REPO = Path(__file__).resolve().parent.parent.parent


@pytest.fixture(scope="module")
def server(mlflow_server):
    """The session's MLflow tracking server (tests/conftest.py mlflow_server)."""
    return mlflow_server


def settings_at(uri: str, art: Path):
    from hqa.config import load_settings

    return load_settings(Path("/nonexistent-hqa.toml"), environ={"HQA_TRACKING__URI": uri}, paths_artifacts=str(art))


def cli(args: list[str], uri: str, art: Path, **extra) -> subprocess.CompletedProcess:
    env = clean_env(PYTHONPATH=str(REPO), HQA_TRACKING__URI=uri, HQA_PATHS__ARTIFACTS=str(art), **extra)
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([sys.executable, "-m", "hqa.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=str(art))


def register(settings, art: Path, capital: str) -> str:
    """A closed-book program whose one demo names ``capital``, logged and registered as ``cb``; its version."""
    program = ClosedBook()
    program.generate.demos = [dspy.Example(question="Capital of Italy?", answer=capital)]
    dest = save_artifact(program, art / "programs" / f"cb-{capital}", {"program": "closedbook", "program_kwargs": {}})
    with tracking.run(settings, f"compile:cb-{capital}") as run:
        assert mlflow_model.log_program(dest, settings=settings, register="cb") is None
    return mlflow.get_run(run.info.run_id).data.tags["registered_model"].rsplit("/", 1)[1]


def demo_answer(settings, uri: str) -> str:
    return open_program(settings, load=uri, configure=False).program.generate.demos[0]["answer"]


def test_aliases_resolve_on_a_tracking_server(server, tmp_path):
    import hqa

    uri, _ = server
    settings = settings_at(uri, tmp_path)
    v1, v2 = register(settings, tmp_path, "Rome"), register(settings, tmp_path, "Milan")
    assert (v1, v2) == ("1", "2")
    assert tracking.set_alias(settings, "cb", v1, "champion") == "models:/cb@champion"
    assert demo_answer(settings, "models:/cb@champion") == "Rome"
    opened = open_program(settings, load="models:/cb@champion", configure=False)
    assert opened.label == "models:/cb@champion" and opened.kind == "closedbook"

    # the CLI moves the alias; everything that opens models:/cb@champion now gets version 2
    moved = cli(["registry", "alias", "cb", v2, "champion"], uri, tmp_path)
    assert moved.returncode == 0, moved.stderr[-2000:]
    assert moved.stdout.strip() == "models:/cb@champion -> models:/cb/2"
    assert mlflow.MlflowClient(uri).get_model_version_by_alias("cb", "champion").version == "2"
    assert demo_answer(settings, "models:/cb@champion") == "Milan"
    assert hqa.load("models:/cb@champion", settings, configure=False).generate.demos[0]["answer"] == "Milan"

    missing = cli(["registry", "alias", "cb", "9", "champion"], uri, tmp_path)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert missing.stderr.startswith("hqa: error: cannot set alias 'champion' of registered model 'cb' to version 9")
    with pytest.raises(ArtifactError, match="cannot fetch MLflow model models:/cb@nobody"):
        open_program(settings, load="models:/cb@nobody", configure=False)


def test_compile_register_alias_then_batch_and_serve_load_it(server, tmp_path):
    uri, _ = server
    out = cli(["compile", "--program", "closedbook", "--optimizer", "none", "--no-eval", "--train-limit", "2",
               "--dev-limit", "1", "--register", "cb-cli", "--alias", "staging"], uri, tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)  # stdout is the JSON alone: MLflow's "View run at" links stay out of it
    assert result["registered"] == "models:/cb-cli/1" and result["alias"] == "models:/cb-cli@staging"
    assert mlflow.MlflowClient(uri).get_model_version_by_alias("cb-cli", "staging").version == "1"
    no_register = cli(["compile", "--program", "closedbook", "--optimizer", "none", "--alias", "x"], uri, tmp_path)
    assert no_register.returncode == 2 and "--alias needs --register" in no_register.stderr

    # hqa batch over models:/NAME@ALIAS (the embedded LM answers one question)
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "1", "question": "What is the capital of France?"}) + "\n")
    batch = cli(["batch", str(questions), "--out", str(tmp_path / "out.jsonl"), "--load", "models:/cb-cli@staging",
                 "--quiet"], uri, tmp_path, HQA_LM__MAX_TOKENS="16")
    assert batch.returncode == 0, batch.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["trace"]["program"] == "closedbook"

    # hqa serve over models:/NAME@ALIAS: /v1/programs names what it serves
    port = free_port()
    env = clean_env(PYTHONPATH=str(REPO), HQA_TRACKING__URI=uri, HQA_PATHS__ARTIFACTS=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "hqa.cli", "serve", "--load", "models:/cb-cli@staging", "--port",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    try:
        wait_port(port, proc, seconds=300)
        served = httpx.get(f"http://127.0.0.1:{port}/v1/programs", timeout=60).json()["served"]
    finally:
        stop(proc)
    assert served["label"] == "models:/cb-cli@staging" and served["program"] == "closedbook"
    assert served["optimizer"] == "none"


def test_alias_without_a_registry_is_one_line(tmp_path):
    env_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = cli(["registry", "alias", "nothing", "1", "champion"], env_uri, tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "registered model 'nothing'" in out.stderr
    assert os.path.exists(tmp_path / "mlflow.db")  # the configured store, not ./mlflow.db of another folder


def test_batch_and_evaluate_trace_every_question(tmp_path):
    """``--trace`` on ``hqa batch`` and ``hqa evaluate``: one MLflow trace per question, with its LM call as a span,
    in the configured store (the embedded LM answers; replies capped at 8 tokens)."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": str(i), "question": q}) + "\n"
                                 for i, q in enumerate(["What is the capital of France?", "Who wrote Hamlet?"])))
    batch = cli(["batch", str(questions), "--out", str(tmp_path / "out.jsonl"), "--program", "closedbook", "--quiet",
                 "--trace"], store, tmp_path, HQA_LM__MAX_TOKENS="8")
    assert batch.returncode == 0, batch.stderr[-2000:]
    evaluate = cli(["evaluate", "--program", "closedbook", "--dataset", "humaniq-compmix", "--limit", "1",
                    "--out", str(tmp_path / "eval"), "--trace"], store, tmp_path, HQA_LM__MAX_TOKENS="8")
    assert evaluate.returncode == 0, evaluate.stderr[-2000:]
    untraced = cli(["batch", str(questions), "--out", str(tmp_path / "out2.jsonl"), "--program", "closedbook",
                    "--quiet"], store, tmp_path, HQA_LM__MAX_TOKENS="8")
    assert untraced.returncode == 0, untraced.stderr[-2000:]
    mlflow.set_tracking_uri(store)
    traces = mlflow.search_traces(locations=[mlflow.get_experiment_by_name("hqa").experiment_id],
                                  return_type="list")
    results = [t for t in traces if "hqa.id" in t.info.tags]  # hqa evaluate's MLflow evaluation results
    assert len(results) == 1 and results[0].info.assessments
    traces = [t for t in traces if t not in results]
    assert len(traces) == 3  # two batch questions + one evaluated question; the untraced batch adds none
    for trace in traces:
        assert [s.span_type for s in trace.data.spans].count("CHAT_MODEL") == 1

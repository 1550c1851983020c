"""The MLflow model of a compiled program: models-from-code, registered, loaded from a fresh process, served by
``mlflow models serve`` on 127.0.0.1, and opened by ``--load models:/NAME/N``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import dspy
import httpx
import mlflow
import pytest
from dspy.utils import DummyLM

from hqa.app import open_program
from hqa.errors import ArtifactError, HQAError
from hqa.optimize import mlflow_model
from hqa.tracking import registry as tracking
from hqa.artifacts.store import save_artifact
from hqa.programs.closedbook import ClosedBook
from standins.servers import free_port, wait_port

REPO = Path(__file__).resolve().parent.parent.parent
Q = "What is the capital of France?"


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    """A closed-book program with one demo, saved, logged and registered as ``hqa-cb`` version 1."""
    from hqa.config import load_settings

    art = tmp_path_factory.mktemp("mlflow-art")
    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(art))
    program = ClosedBook()
    program.generate.demos = [dspy.Example(question="Capital of Italy?", answer="Rome")]
    dest = save_artifact(program, art / "programs" / "cb", {"program": "closedbook", "program_kwargs": {}})
    with tracking.run(settings, "compile:cb") as run:
        assert mlflow_model.log_program(dest, settings=settings, register="hqa-cb") is None
    tags = mlflow.get_run(run.info.run_id).data.tags
    assert tags["registered_model"] == "models:/hqa-cb/1"
    return settings, art, dest


def _env(art: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": f"sqlite:///{art}/mlflow.db",
           "HQA_PATHS__ARTIFACTS": str(art), "HQA_LM__MAX_TOKENS": "24"}
    env.pop("HQA_API_KEY", None)
    return env


def test_model_is_code_plus_program_json_no_pickles_no_secrets(registered):
    settings, art, dest = registered
    local = Path(mlflow.artifacts.download_artifacts("models:/hqa-cb/1"))
    files = {p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()}
    assert {"artifacts/cb/program.json", "artifacts/cb/manifest.json", "MLmodel", "pyfunc.py"} <= files
    assert not any(f.endswith((".pkl", ".pickle", ".cloudpickle")) for f in files)
    assert (local / "artifacts/cb/program.json").read_bytes() == (dest / "program.json").read_bytes()
    mlmodel = (local / "MLmodel").read_text()
    assert "loader_module: mlflow.pyfunc.loaders.code_model" in mlmodel and "api_key" not in mlmodel.lower()


def test_load_models_uri_through_open_program(registered):
    settings, _art, _dest = registered
    opened = open_program(settings, load="models:/hqa-cb/1", configure=False)
    assert opened.label == "models:/hqa-cb/1" and opened.kind == "closedbook"
    assert opened.program.generate.demos[0]["answer"] == "Rome"  # the compiled state came along
    lm = DummyLM([{"answer": "Paris"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        assert opened.program(question=Q).answer == "Paris"
    assert "Capital of Italy?" in json.dumps(lm.history[-1]["messages"])  # the demo reached the prompt
    with pytest.raises(ArtifactError, match="cannot fetch MLflow model models:/hqa-cb/9"):
        open_program(settings, load="models:/hqa-cb/9", configure=False)


def test_missing_world_is_a_clear_error(registered, tmp_path, monkeypatch):
    """A program that needs the knowledge pack, logged against a world that is gone."""
    settings, art, _dest = registered
    gone = tmp_path / "gone"
    dest = save_artifact(ClosedBook(), tmp_path / "programs" / "simple-x",
                         {"program": "simple", "program_kwargs": {}})
    from hqa.config import load_settings

    other = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(gone))
    with tracking.run(settings, "compile:simple-x"):
        from hqa.optimize.mlflow_model import log_model

        info = log_model(dest, other)
    monkeypatch.delenv("HQA_PATHS__ARTIFACTS", raising=False)
    with pytest.raises(HQAError, match=f"cannot load hqa model 'simple-x' with world {gone}"):
        mlflow.pyfunc.load_model(info.model_uri)


@pytest.mark.real_lm
def test_fresh_process_predicts(registered):
    _settings, art, _dest = registered
    code = ("import json, mlflow\n"
            "m = mlflow.pyfunc.load_model('models:/hqa-cb/1')\n"
            f"out = m.predict({{'question': [{Q!r}]}})\n"
            "print(json.dumps(out.to_dict(orient='records')))\n")
    env = _env(art)
    env.pop("HQA_PATHS__ARTIFACTS")  # the model's own recorded world is used
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600,
                          cwd=str(art))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rows[0]["question"] == Q and rows[0]["answer"].strip()
    assert json.loads(rows[0]["trace"])["program"] == "closedbook"


@pytest.mark.server
@pytest.mark.real_lm
def test_mlflow_models_serve_answers_invocations(registered, tmp_path):
    _settings, art, _dest = registered
    port = free_port()
    mlflow_bin = str(Path(sys.executable).parent / "mlflow")
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([mlflow_bin, "models", "serve", "-m", "models:/hqa-cb/1", "--env-manager", "local",
                             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                            stdout=log, stderr=log, env=_env(art), cwd=str(tmp_path), start_new_session=True)
    try:
        wait_port(port, proc, seconds=300)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ping", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        r = httpx.post(f"http://127.0.0.1:{port}/invocations", timeout=600,
                       json={"dataframe_records": [{"question": Q}]})
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        log.close()
    assert r.status_code == 200, r.text + (tmp_path / "serve.log").read_text()[-2000:]
    preds = r.json()["predictions"]
    assert preds[0]["question"] == Q and preds[0]["answer"].strip()


def test_hqa_load_uses_open_program(registered):
    import hqa

    settings, _art, dest = registered
    program = hqa.load(dest, settings, configure=False)
    assert program.generate.demos[0]["answer"] == "Rome"
    via_registry = hqa.load("models:/hqa-cb/1", settings, configure=False)
    assert via_registry.generate.demos[0]["question"] == "Capital of Italy?"


def test_cli_compile_register(tmp_path):
    from hqa.config import load_settings

    env = {**os.environ, "PYTHONPATH": str(REPO), "HQA_PATHS__ARTIFACTS": str(tmp_path)}
    for k in ("MLFLOW_TRACKING_URI", "HQA_LM__PROVIDER"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "hqa.cli", "compile", "--program", "closedbook", "--optimizer", "none", "--no-eval",
           "--train-limit", "2", "--dev-limit", "1", "--register", "cb-cli"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["registered"] == "models:/cb-cli/1"
    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(tmp_path))
    opened = open_program(settings, load="models:/cb-cli/1", configure=False)
    assert opened.kind == "closedbook" and opened.manifest["optimizer"] == "none"
    bad = subprocess.run(cmd[:-1] + ["bad/name"], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "may only use letters" in bad.stderr

"""Scale-out on loopback: the LM behind ``python -m llama_cpp.server`` (OpenAI-compatible), SPARQL behind
``oxigraph serve-read-only``, and an MLflow tracking server — each a real subprocess on 127.0.0.1, bounded in time
and always terminated (with its process group) by its fixture."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prockit import clean_env, start
from standins.servers import stop, wait_http

from standins.servers import free_port

# llama_cpp.server's own dependencies (the [server] extra of llama-cpp-python)
SERVER_DEPS = ("fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")
MISSING = [m for m in SERVER_DEPS if importlib.util.find_spec(m) is None]
needs_llama_server = pytest.mark.skipif(
    bool(MISSING), reason=f"llama_cpp.server needs {', '.join(MISSING)} (pip install 'llama-cpp-python[server]')"
)


@pytest.fixture(scope="module")
def lm_server():
    from hqa.lm.models import packaged_gguf

    port = free_port()
    proc = start([sys.executable, "-m", "llama_cpp.server", "--model", str(packaged_gguf()), "--host", "127.0.0.1",
                  "--port", str(port), "--n_ctx", "4096", "--model_alias", "smollm2"])
    try:
        api_base = f"http://127.0.0.1:{port}/v1"
        wait_http(api_base + "/models", proc)
        yield api_base
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def standin_lm():
    """The loopback OpenAI-compatible LM of the benchmarks (standins/openai_lm.py), answering at once: for the
    evaluate runs below, whose subject is hqa's threads over its HTTP and embedded sources, not the LM's replies
    (the real llama_cpp.server is exercised by the ask and DSPy-threads tests above; with it each run took ~2 min)."""
    from standins.openai_lm import Behaviour, start as start_lm

    running = start_lm(Behaviour(latency=0.0))
    yield running
    running.stop()


def run_cli(args: list[str], cwd: Path, timeout: float = 600, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hqa.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=clean_env(**env))


@pytest.mark.server
@pytest.mark.real_lm
@needs_llama_server
def test_cli_ask_against_llama_cpp_server(lm_server, tmp_path):
    proc = run_cli(["ask", "--program", "closedbook", "--json", "--lm", "openai_compatible", "--api-base", lm_server,
                    "--model", "smollm2", "What is the capital of France?"], tmp_path,
                   HQA_PATHS__ARTIFACTS=str(tmp_path / "artifacts"))  # own LM cache: a real request
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert isinstance(out["answer"], str) and out["trace"]["program"] == "closedbook"
    assert out["trace"]["answers"]["parametric"] == out["answer"]


@pytest.mark.server
@pytest.mark.real_lm
@needs_llama_server
def test_dspy_threads_share_the_server(lm_server):
    import dspy

    from hqa.config import load_settings
    from hqa.lm.models import build_lm, check_server
    from hqa.signatures.basic import ClosedBookAnswer

    check_server(lm_server)
    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, lm_provider="openai_compatible",
                             lm_api_base=lm_server, lm_model="smollm2", lm_cache=False, lm_max_tokens=48)
    lm = build_lm(settings)
    questions = [f"What is {i} plus {i}?" for i in range(6)]

    def ask(q):
        with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
            return dspy.Predict(ClosedBookAnswer)(question=q).answer

    with ThreadPoolExecutor(max_workers=3) as pool:
        answers = list(pool.map(ask, questions))
    assert len(answers) == 6 and all(isinstance(a, str) for a in answers)
    # every thread's call went to the server (a reply the chat format cannot parse is retried as JSON)
    assert 6 <= len(lm.history) <= 12


@pytest.mark.server
def test_evaluate_simple_with_both_servers_and_threads(standin_lm, pack_sparql, built_pack, tmp_path):
    out = tmp_path / "run"
    proc = run_cli(["evaluate", "--program", "simple", "--dataset", "compmix/test", "--limit", "4", "--threads", "4",
                    "--out", str(out)], tmp_path, timeout=900,
                   HQA_LM__PROVIDER="openai_compatible", HQA_LM__API_BASE=standin_lm.api_base,
                   HQA_LM__MODEL="standin", HQA_LM__CACHE="false", HQA_KG__KIND="sparql", HQA_KG__ENDPOINT=pack_sparql,
                   HQA_PATHS__ARTIFACTS=str(built_pack))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and len({r["id"] for r in rows}) == 4
    assert not any(r["error"] or r.get("degraded") for r in rows)
    queries = [q for r in rows for q in r["trace"]["sparql"]]
    assert queries and all(q["error"] is None for q in queries)  # the KG answered over HTTP
    assert all(r["lm_calls"] >= 2 for r in rows)


@pytest.mark.server
def test_evaluate_threads_4_over_the_embedded_store_has_a_clean_stderr(standin_lm, built_pack, tmp_path):
    """Four threads querying the embedded Oxigraph store: its results are materialised where the query ran (the
    store's worker process), so no pyoxigraph object crosses threads ("PyQuerySolutions is unsendable")."""
    out = tmp_path / "run"
    proc = run_cli(["evaluate", "--program", "simple", "--dataset", "compmix/test:answerable", "--limit", "4",
                    "--threads", "4",
                    "--out", str(out)], tmp_path, timeout=900,
                   HQA_LM__PROVIDER="openai_compatible", HQA_LM__API_BASE=standin_lm.api_base,
                   HQA_LM__MODEL="standin", HQA_LM__CACHE="false", HQA_PATHS__ARTIFACTS=str(built_pack))
    assert proc.returncode == 0, proc.stderr[-3000:]
    noise = [line for line in proc.stderr.splitlines()
             if "Traceback" in line or "unsendable" in line or "Exception ignored" in line or "panicked" in line]
    assert noise == [], proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and not any(r["error"] for r in rows)
    assert any(q["rows"] for r in rows for q in r["trace"]["sparql"])  # the embedded store answered


@pytest.mark.server
def test_compile_logs_to_an_mlflow_server(mlflow_server, tmp_path):
    import mlflow

    uri, _ = mlflow_server
    proc = run_cli(["compile", "--program", "closedbook", "--optimizer", "none", "--name", "served",
                    "--dev-limit", "2", "--train-limit", "2"], tmp_path,
                   HQA_TRACKING__URI=uri, HQA_PATHS__ARTIFACTS=str(tmp_path / "artifacts"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = mlflow.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("hqa")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    run = next(r for r in runs if r.data.tags.get("mlflow.runName") == "compile:served")
    assert run.info.status == "FINISHED" and "dev_recall" in run.data.metrics
    assert (tmp_path / "artifacts" / "programs" / "served" / "manifest.json").exists()
    assert not (tmp_path / "artifacts" / "mlflow.db").exists()  # tracked on the server, not locally

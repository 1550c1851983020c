"""Scale-out on loopback: the LM behind llama_cpp.server (OpenAI-compatible) and an MLflow tracking server."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from hqa.servers import free_port, wait_port


@pytest.fixture(scope="module")
def lm_server():
    from hqa.lm import packaged_gguf

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(packaged_gguf()), "--host",
                             "127.0.0.1", "--port", str(port), "--n_ctx", "4096", "--model_alias", "smollm2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env.update(extra)
    return env


@pytest.mark.server
@pytest.mark.real_lm
def test_cli_against_openai_compatible_server(lm_server, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hqa.cli", "ask", "--program", "closedbook", "--json", "--lm",
                           "openai_compatible", "--api-base", lm_server, "--model", "smollm2",
                           "What is the capital of France?"],
                          capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '"answer"' in proc.stdout


@pytest.mark.server
@pytest.mark.real_lm
def test_dspy_threads_share_the_server(lm_server):
    import dspy

    from hqa.config import load_settings
    from hqa.lm import build_lm
    from hqa.signatures.basic import ClosedBookAnswer

    settings = load_settings(environ={"HQA_LM__PROVIDER": "openai_compatible", "HQA_LM__API_BASE": lm_server,
                                      "HQA_LM__MODEL": "smollm2", "HQA_LM__CACHE": "false"})
    lm = build_lm(settings)
    questions = [f"What is {i} plus {i}?" for i in range(6)]

    def ask(q):
        with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
            return dspy.Predict(ClosedBookAnswer)(question=q).answer

    with ThreadPoolExecutor(max_workers=3) as pool:
        answers = list(pool.map(ask, questions))
    assert len(answers) == 6 and all(isinstance(a, str) for a in answers)


@pytest.mark.server
def test_compile_logs_to_an_mlflow_server(tmp_path, built_pack):
    import mlflow

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                               f"sqlite:///{tmp_path / 'server.db'}", "--default-artifact-root",
                               (tmp_path / "server-artifacts").as_uri(), "--host", "127.0.0.1", "--port", str(port),
                               "--workers", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, server, seconds=180)
        uri = f"http://127.0.0.1:{port}"
        env = clean_env(HQA_TRACKING__URI=uri, HQA_PATHS__ARTIFACTS=str(built_pack))
        proc = subprocess.run([sys.executable, "-m", "hqa.cli", "compile", "--program", "closedbook", "--optimizer",
                               "none", "--name", "served", "--dev", "mintaka", "--dev-limit", "2", "--train-limit", "2"],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        client = mlflow.MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name("hqa")
        runs = client.search_runs([exp.experiment_id])
        assert any(r.data.tags.get("mlflow.runName") == "compile:served" and "dev_recall" in r.data.metrics for r in runs)
    finally:
        server.terminate()
        server.wait(timeout=30)

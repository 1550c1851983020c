"""Processes and servers for tests: start a server process in its own session (stopping it and waiting for its HTTP
answer are :mod:`standins.servers`'), a clean environment for children, the ``hqa`` command run as a user runs it, an
app served by uvicorn as ``hqa serve`` serves it, and the programs served in tests."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import dspy
import uvicorn
from lmkit import step

from hqa.app import OpenedProgram
from hqa.serve import create_app
from standins.servers import free_port

REPO = Path(__file__).resolve().parent.parent


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    # offline, litellm (imported by mlflow and dspy) must not fetch its cost map: without this an `mlflow server`
    # deadlocks at startup (litellm's background fetch and the import lock)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env.update(extra)
    return env


def start(cmd: list[str], env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env or clean_env(),
                            start_new_session=True)


def interrupt_when(proc: subprocess.Popen, ready: Callable[[], bool], what: str, *, timeout: float = 300,
                   wait: float = 120) -> tuple[str, float]:
    """Ctrl-C for a running ``hqa`` process: SIGINT once ``ready()`` holds (polled for up to ``timeout`` s; the
    process must still be running then), its stderr and the seconds it took to end after the signal.  A process
    still running after ``wait`` s is killed."""
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None and not ready():
            time.sleep(0.05)
        assert proc.poll() is None, f"{what} ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=wait)
        return err, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run_hqa(*args: str, cwd: Path, stdin: str | None = None, env_extra: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m hqa.cli ARGS`` in ``cwd`` as a user would run it: no HQA_* variable of this process, this checkout
    on PYTHONPATH; output captured as text."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env.update(PYTHONPATH=str(REPO), **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "hqa.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, input=stdin, timeout=timeout)


UA = "hqa-live-test/1.0 (https://example.org/hqa; live@example.org)"


def live_settings(settings_for, services, cache: Path, mode: str):
    return settings_for(text_kind="wikipedia", text_endpoint=services["wiki"], linker_kind="wikidata",
                        linker_endpoint=services["wikidata"], kg_kind="sparql", kg_endpoint=services["sparql"],
                        kg_timeout=10.0, http_cache_mode=mode, http_cache_path=str(cache), http_user_agent=UA,
                        http_max_retries=2, http_backoff_base=0.01)


class Recorder:
    """A program that records the questions it is asked (a refused request must never reach it)."""

    def __init__(self):
        self.asked: list[str] = []

    def __call__(self, question):
        self.asked.append(question)
        return dspy.Prediction(answer=f"echo {question}", trace={"program": "recorder", "tool_calls": []})


@contextlib.contextmanager
def serving(app, header_timeout: float = 10.0):
    """``app`` served as ``hqa serve`` serves it (hqa.serve.server) on a free loopback port; yields the port."""
    from hqa.serve.server import server_config

    port = free_port()
    server = uvicorn.Server(server_config(app, header_timeout=header_timeout, host="127.0.0.1", port=port))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.02)
    assert server.started, "uvicorn did not start"
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(60)


#: the HQA agent's replies for "What is the capital of Gabon?": KG then text tools, Finish, memory, merge
AGENT_SCRIPT = [
    step("Find the QID of Gabon", "GetWikidataID", "Gabon"),
    step("Query its capital", "RunSparql", "SELECT ?x WHERE { wd:Q1000 wdt:P36 ?x }"),
    step("Check Wikipedia", "WikiSearch", "capital of Gabon"),
    {"title": "Libreville", "summary": "Libreville is the capital of Gabon."},  # WikiSearch's relevant-page LM
    step("Done", "Finish", "Wikipedia_Answer: Libreville, Wikidata_Answer: [Libreville]"),
    {"answer": "Paris"},
    {"answer": "Libreville"},
]


def agent_app(settings_for, lm):
    """The HQA agent over the session pack's SPARQL store and linker (text search scripted), served by ``lm``."""
    from hqa.programs.humaniq import HumanIQAgent
    from hqa.retrievers.base import Evidence
    from hqa.toolbox import Toolbox

    def dense(query, k=5):
        return [Evidence(text="Libreville is the capital and largest city of Gabon.", source="text", score=0.9,
                         meta={"id": "p-test", "title": "Libreville"})][:k]

    serve_test_tb = Toolbox(settings_for(programs_answer_mode="free"), dense=dense)
    agent = HumanIQAgent(toolbox=serve_test_tb)
    dspy.configure(lm=lm, adapter=dspy.ChatAdapter())
    return agent, create_app(OpenedProgram(agent, label="humaniq", kind="humaniq", source="program"))


def events_of(lines) -> list[tuple[str, dict]]:
    out, event = [], None
    for line in lines:
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            out.append((event, json.loads(line[6:])))
    return out


def _chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def _abstaining(question):
    return dspy.Prediction(answer="", abstained=True, reason="confidence 0.10 is below the calibrated threshold 0.66",
                           confidence=0.1, candidates=[{"text": "Knoxville", "score": 1.5, "source": "triples",
                                                        "support": "place of birth"}],
                           trace={"program": "simple", "selective": {"abstained": True, "confidence": 0.1}})

"""Faults.  With real processes or sockets on 127.0.0.1: the SPARQL server (oxigraph) killed mid-evaluation and
restarted, endpoints that stall or trickle, an LM server that is down / dies / answers garbage, and Ctrl-C sent to
a real ``hqa evaluate`` process.  Injected in-process: unparsable LM replies (DummyLM), a program that raises, and a
full disk while saving an artifact or appending rows (patched ``fsync`` / ``open`` / ``os.replace``).

Resume policy (hqa/jobs/evaluate.py): a question is asked again on resume when its row is missing, cut short, has an
``error`` (the program raised: LM server gone, ...), or is ``degraded`` (it was answered while the SPARQL endpoint
was unreachable, so its answer reflects the outage).  Every other row is kept as is.
"""

from __future__ import annotations

import json
import os
import signal
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path

import dspy
import pytest
from conftest import KeepOrderReranker, default_sigint
from dspy.utils import DummyLM
from lmkit import _FakeOpenAI
from prockit import interrupt_when

from hqa.errors import EndpointError
from hqa.jobs.evaluate import evaluate
from hqa.schemas.run_folder import read_rows
from hqa.toolbox import Toolbox
from hqa.retrievers.sparql.backends import HttpSparql
from standins.servers import free_port, start_oxigraph

REPO = Path(__file__).resolve().parent.parent.parent


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env.update(extra)
    return env


def stderr_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def no_passages(query, k=5):
    return []


# -- (a) the SPARQL server dies mid-evaluation, comes back, the run resumes -----------------------------------------
class Recorded(dspy.Module):
    """Wraps a program and records which questions it was asked."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.asked: list[str] = []
        self._lock = threading.Lock()

    def forward(self, question):
        with self._lock:
            self.asked.append(question)
        return self.inner(question=question)


@pytest.mark.server
@pytest.mark.parametrize("threads", [1, 2])
def test_sparql_server_killed_mid_evaluation_then_resumed(settings_for, tmp_path, threads):
    from hqa.data.datasets import load_examples
    from hqa.programs.simple import SimpleHybrid

    port = free_port()
    store = settings_for().kg_path
    server, url = start_oxigraph(store, port)
    settings = settings_for(kg_kind="sparql", kg_endpoint=url, kg_timeout=2.0)
    tb = Toolbox(settings, dense=no_passages, bm25=no_passages, reranker=KeepOrderReranker())
    tb.sparql.client.settings.max_retries, tb.sparql.client.settings.backoff_base = 1, 0.05
    aults_kg_tb = tb
    examples = load_examples("compmix/test", 8)
    with_entities = {ex.question for ex in examples if tb.linker.spot(ex.question, k=2)}
    assert len(with_entities) >= 4  # the fault must hit questions that query the KG
    out = tmp_path / "run" / "predictions.jsonl"
    killed: dict = {}

    def kill_after_two(row):
        if not killed and len(out.read_text().splitlines()) >= 2:
            server.kill()  # SIGKILL: no goodbye, connections in flight just break
            server.wait(timeout=10)
            killed["at"] = time.monotonic()

    first = Recorded(SimpleHybrid(toolbox=aults_kg_tb))
    try:
        with dspy.context(lm=DummyLM([{"answer": "x"}] * 200), adapter=dspy.ChatAdapter()):
            summary = evaluate(first, examples, threads=threads, out=out, on_row=kill_after_two)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=10)
    assert killed, "the server was never killed"
    # no crash, nothing lost: one complete row per question
    assert summary.n == 8 and len(out.read_text().splitlines()) == 8
    rows = read_rows(out)
    assert sorted(r["id"] for r in rows) == sorted(ex.id for ex in examples)
    failed = {r["question"] for r in rows if r.get("error") or r.get("degraded")}
    assert failed, "the outage left no trace in the rows"
    for r in rows:
        if r.get("degraded"):  # the outage is recorded as SPARQL-error observations, flagged unavailable
            errors = [q for q in r["trace"]["sparql"] if q.get("error")]
            assert errors and all(q.get("unavailable") and "unreachable" in q["error"] for q in errors)
    assert failed <= with_entities

    server, _ = start_oxigraph(store, port)  # back on the same address
    again = Recorded(SimpleHybrid(toolbox=aults_kg_tb))
    try:
        with dspy.context(lm=DummyLM([{"answer": "x"}] * 200), adapter=dspy.ChatAdapter()):
            second = evaluate(again, examples, threads=threads, out=out)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert sorted(again.asked) == sorted(failed)  # only the questions the outage spoiled were asked again
    assert second.n == 8 and second.errors == 0
    rows = read_rows(out)
    assert len(rows) == 8 and not any(r.get("error") or r.get("degraded") for r in rows)
    assert all(q.get("error") is None for r in rows for q in r["trace"]["sparql"])


# -- (b) endpoints that stall or trickle -----------------------------------------------------------------------------
class _SlowServer(socketserver.ThreadingTCPServer):
    """Reads a request, then either never answers (``stall``) or sends a valid reply one byte at a time."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, mode: str, pace: float = 0.2):
        super().__init__(("127.0.0.1", 0), _SlowHandler)
        self.mode, self.pace, self.connections = mode, pace, 0
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/sparql"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _SlowHandler(socketserver.BaseRequestHandler):
    def handle(self):
        self.server.connections += 1
        self.request.settimeout(30)
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = self.request.recv(65536)
                if not chunk:
                    return
                data += chunk
            if self.server.mode == "stall":
                self.request.recv(1)  # wait until the client gives up
                return
            body = b'{"head":{"vars":["x"]},"results":{"bindings":[]}}'
            reply = (b"HTTP/1.1 200 OK\r\nContent-Type: application/sparql-results+json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
            if self.server.mode == "trickle-headers":
                for i in range(len(reply)):
                    self.request.sendall(reply[i:i + 1])
                    time.sleep(self.server.pace)
            else:  # trickle-body
                head, _, rest = reply.partition(b"\r\n\r\n")
                self.request.sendall(head + b"\r\n\r\n")
                for i in range(len(rest)):
                    self.request.sendall(rest[i:i + 1])
                    time.sleep(self.server.pace)
        except OSError:
            pass


@pytest.mark.parametrize("mode", ["stall", "trickle-headers", "trickle-body"])
def test_slow_endpoint_times_out_with_retries_and_backoff(mode):
    server = _SlowServer(mode)
    timeout, retries, backoff = 1.0, 2, 0.2
    try:
        http = HttpSparql(server.url, timeout=timeout, retries=retries, backoff=backoff)
        sleeps: list[float] = []
        http.client._sleep = lambda s: (sleeps.append(s), time.sleep(s))
        start = time.monotonic()
        res = http.run("SELECT ?x WHERE { ?x ?p ?o }")
        elapsed = time.monotonic() - start
        assert not res.ok and res.unavailable and f"unreachable after {retries + 1} tries" in res.error
        # a backoff ran between tries, each within its exponential ceiling (full jitter: uniform below it)
        assert len(sleeps) == retries and all(0 <= s <= backoff * 2**i for i, s in enumerate(sleeps))
        # every try waited for its timeout (a stalled or trickling server never completes a reply, so returning at
        # all means each try was cut at its wall-clock bound)
        assert timeout * (retries + 1) * 0.9 + sum(sleeps) <= elapsed
        assert server.connections == retries + 1
    finally:
        server.stop()


@pytest.mark.parametrize("mode", ["stall", "trickle-body"])
def test_a_live_endpoint_that_hangs_or_drips_is_given_up_once_per_source_and_named(mode, settings_for):
    """Text, linker and KG at one loopback port that accepts and then hangs, or drips its reply a byte at a time:
    each HTTP client gives the host ``http.timeout_retries`` + 1 tries and then treats it as down, so a question
    costs that many tries per client whatever the number of requests its program makes (it was 5 tries per request:
    213 s with the default timeouts); every source that could not answer says so, and the abstention names the
    sources used (it said "the knowledge pack")."""
    from lmkit import QUESTION, ScriptLM

    from hqa.programs import build_program
    from hqa.schemas.trace import failed_sources

    server = _SlowServer(mode)
    base = server.url.rsplit("/", 1)[0]
    try:
        settings = settings_for(text_kind="wikipedia", text_endpoint=f"{base}/w/api.php", linker_kind="wikidata",
                                linker_endpoint=f"{base}/wikidata/api.php", kg_kind="sparql",
                                kg_endpoint=f"{base}/sparql", kg_timeout=0.5, http_timeout=0.5,
                                http_cache_mode="off", http_backoff_base=0.01)
        tb = Toolbox(settings, reranker=KeepOrderReranker())
        tb.check()
        program = build_program("simple", toolbox=tb)
        with dspy.context(lm=ScriptLM(), adapter=dspy.ChatAdapter()):
            pred = program(question=QUESTION)
    finally:
        server.stop()
    tries = settings.http.timeout_retries + 1
    assert tries < settings.http.max_retries + 1
    assert server.connections == 2 * tries  # the KG's client, and the client the text source and linker share
    assert tb.warned_sources == {"kg"} and f"unreachable after {tries} tries" in tb.warnings[0]
    failed = failed_sources(pred.trace)
    assert {"text", "linker"} <= set(failed) and all("127.0.0.1" in error for error in failed.values())
    assert pred.abstained and f"Wikipedia ({base}/w/api.php)" in pred.reason
    assert f"Wikidata ({base}/wikidata/api.php) and the SPARQL endpoint {base}/sparql" in pred.reason


def test_ask_over_a_hanging_live_endpoint_names_each_source_once_and_the_sources_it_used(built_pack, tmp_path):
    """``hqa ask`` as the issue ran it: only the KG had a warning line, the abstention said "No answer found in the
    knowledge pack", and it took 213 s with the default timeouts."""
    server = _SlowServer("stall")
    base = server.url.rsplit("/", 1)[0]
    env = clean_env(HQA_PATHS__ARTIFACTS=str(built_pack), HQA_HTTP__CACHE_MODE="off", HQA_TEXT__KIND="wikipedia",
                    HQA_TEXT__ENDPOINT=f"{base}/w/api.php", HQA_LINKER__KIND="wikidata",
                    HQA_LINKER__ENDPOINT=f"{base}/wikidata/api.php", HQA_KG__KIND="sparql",
                    HQA_KG__ENDPOINT=f"{base}/sparql", HQA_KG__TIMEOUT="0.5", HQA_HTTP__TIMEOUT="0.5")
    try:
        proc = subprocess.run([sys.executable, "-m", "hqa.cli", "ask", "--program", "simple",
                               "What is the capital of Gabon?"], capture_output=True, text=True, cwd=tmp_path,
                              timeout=600, env=env)
    finally:
        server.stop()
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    warnings = [line for line in stderr_lines(proc.stderr) if line.startswith("hqa: warning:")]
    assert "SPARQL endpoint" in warnings[0] and "is not usable" in warnings[0]  # the start-up check, once
    answered = [w.split(":")[2].strip() for w in warnings[1:]]
    assert sorted(answered) == ["the entity linker could not answer", "the text source could not answer",
                                "the triple search could not answer"], proc.stderr
    assert f"No answer found in Wikipedia ({base}/w/api.php), Wikidata ({base}/wikidata/api.php) and the SPARQL " \
           f"endpoint {base}/sparql" in proc.stdout
    assert server.connections == 4  # two tries by each of the two clients, for every request of the question


def test_sub_second_timeouts_are_honoured_and_ping_fails_fast():
    server = _SlowServer("stall")
    try:
        def elapsed(timeout: float) -> float:
            start = time.monotonic()
            assert not HttpSparql(server.url, timeout=timeout, retries=0).run("ASK { ?s ?p ?o }").ok
            return time.monotonic() - start

        # 0.5 s is not rounded up to a whole second: it ends clearly before a 1.5 s timeout (a relative check,
        # no absolute bound on this shared machine)
        short, long = elapsed(0.5), elapsed(1.5)
        assert short >= 0.45 and long - short >= 0.75
        http = HttpSparql(server.url, timeout=0.5, retries=0)
        with pytest.raises(EndpointError, match="is not usable"):
            http.ping()
    finally:
        server.stop()


def test_unreachable_endpoint_in_the_cli_is_one_warning_and_the_program_answers(built_pack, tmp_path):
    """Decided in issue 40 (docs/security.md): a remote KG down at start-up no longer stops ``ask`` (exit 2); the
    program answers from its other sources, and the outage is one warning line."""
    port = free_port()  # nothing listens there
    proc = subprocess.run([sys.executable, "-m", "hqa.cli", "ask", "--program", "simple", "--kg", "sparql",
                           "--endpoint", f"http://127.0.0.1:{port}/query", "Who wrote Dune?"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env=clean_env(HQA_PATHS__ARTIFACTS=str(built_pack)))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    warnings = [line for line in stderr_lines(proc.stderr) if line.startswith("hqa: warning:")]
    assert len(warnings) == 1 and f"127.0.0.1:{port}" in warnings[0] and "is not usable" in warnings[0]
    assert proc.stdout.strip()  # an answer (or an abstention) was printed


# -- (c) the LM server is down, dies mid-run, or answers garbage -----------------------------------------------------
def test_lm_server_down_check_server_is_clear():
    from hqa.config import load_settings
    from hqa.lm.models import build_lm, check_server

    port = free_port()
    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, lm_provider="openai_compatible",
                             lm_api_base=f"http://127.0.0.1:{port}/v1", lm_model="x")
    lm = build_lm(settings)  # building never contacts the server
    assert isinstance(lm, dspy.LM)
    with pytest.raises(EndpointError, match=rf"LM server at http://127.0.0.1:{port}/v1 is not reachable"):
        check_server(settings.lm.api_base, timeout=2)


def test_lm_server_that_never_answers_fails_within_the_timeout():
    from hqa.lm.models import check_server

    server = _SlowServer("stall")
    try:
        with pytest.raises(EndpointError, match="is not reachable"):  # returning at all: the timeout fired
            check_server(server.url.rsplit("/", 1)[0] + "/v1", timeout=1)
    finally:
        server.stop()


def test_cli_with_lm_server_down_exits_2_with_one_line(tmp_path):
    port = free_port()
    proc = subprocess.run([sys.executable, "-m", "hqa.cli", "ask", "--program", "closedbook", "--lm",
                           "openai_compatible", "--api-base", f"http://127.0.0.1:{port}/v1", "--model", "x", "Hi?"],
                          capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = stderr_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"hqa: error: LM server at http://127.0.0.1:{port}/v1"), lines


def test_lm_server_dies_mid_evaluation_then_resumed(tmp_path):
    from hqa.config import load_settings
    from hqa.lm.models import build_lm
    from hqa.programs.closedbook import ClosedBook

    server = _FakeOpenAI(die_after=2)  # answers two questions, then dies
    port = server.server_address[1]
    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, lm_provider="openai_compatible",
                             lm_api_base=server.api_base, lm_model="x", lm_cache=False, lm_num_retries=0,
                             lm_timeout=5.0, lm_response_format="none")  # it speaks DSPy's chat format only
    lm = build_lm(settings)
    examples = [dspy.Example(id=f"q{i}", question=f"Question number {i}?", answers=["Paris"]).with_inputs("question")
                for i in range(6)]
    out = tmp_path / "predictions.jsonl"

    first = Recorded(ClosedBook())
    try:
        with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
            summary = evaluate(first, examples, out=out)
    finally:
        server.stop()
    assert summary.n == 6 and len(out.read_text().splitlines()) == 6
    failed = {r["question"] for r in read_rows(out) if r.get("error")}
    assert len(failed) == 4 and summary.errors == 4  # the LM error is the row's error, the run goes on

    server = _FakeOpenAI(port=port)
    again = Recorded(ClosedBook())
    try:
        with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
            second = evaluate(again, examples, out=out)
    finally:
        server.stop()
    assert sorted(again.asked) == sorted(failed) and server.completions == 4
    assert second.errors == 0 and second.metrics["em"] == 1.0


@pytest.mark.parametrize("mode", ["500", "garbage"])
def test_cli_with_a_broken_lm_server_is_one_line(tmp_path, mode):
    server = _FakeOpenAI(mode)
    try:
        proc = subprocess.run([sys.executable, "-m", "hqa.cli", "ask", "--program", "closedbook", "--lm",
                               "openai_compatible", "--api-base", server.api_base, "--model", "x", "Hi?"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=300,
                              env=clean_env(HQA_PATHS__ARTIFACTS=str(tmp_path / "artifacts"), HQA_LM__NUM_RETRIES="0"))
    finally:
        server.stop()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-1500:]
    last = stderr_lines(proc.stderr)[-1]
    if mode == "500":  # the response-format probe (lm.response_format = auto) is the first to hear the 500s
        assert last.startswith(f"hqa: error: LM server at {server.api_base} answered every request of the "
                               "response-format probe with an error (json_schema: HTTP 500;"), last
    else:
        assert last.startswith("hqa: error: the LM failed"), last


# -- (f) Ctrl-C during `hqa compile --force`, started as a script's background job -----------------------------------
@pytest.mark.real_lm
def test_sigint_stops_compile_force_even_when_started_with_sigint_ignored(tmp_path):
    """``hqa compile --force & … kill -INT``: a shell starts a background job with SIGINT ignored, which Python keeps;
    the compile ran to the end, exited 0 and replaced the program (in 4 of 5 timings).  Now SIGINT is hqa's in every
    phase: exit 130, and the program saved before stays as it was."""
    from hqa.artifacts.store import save_artifact
    from hqa.programs.closedbook import ClosedBook

    art = tmp_path / "artifacts"
    old = save_artifact(ClosedBook(), art / "programs" / "cb", {"program": "closedbook", "program_kwargs": {}})
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    env = clean_env(HQA_PATHS__ARTIFACTS=str(art), HQA_LM__MAX_TOKENS="48")
    cmd = [sys.executable, "-m", "hqa.cli", "compile", "--program", "closedbook", "--optimizer", "none",
           "--dev", "compmix/test", "--dev-limit", "20", "--name", "cb", "--force"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    # once the dev evaluation has written a row: the compile is well under way
    err, _ = interrupt_when(proc, lambda: any(p.read_text().strip() for p in (art / "runs").glob("cb-*/predictions.jsonl")),
                            "the compile", timeout=900, wait=300)
    assert proc.returncode == 130 and "hqa: interrupted" in stderr_lines(err), err[-2000:]
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before


# -- (g) Ctrl-C during `hqa evaluate`, then resume ------------------------------------------------------------------
@pytest.mark.real_lm
def test_ctrl_c_during_cli_evaluate_then_resume(tmp_path):
    LIMIT = 8  # questions: 3 answered before Ctrl-C, one in flight, the rest asked on resume
    env = clean_env(HQA_PATHS__ARTIFACTS=str(tmp_path / "artifacts"), HQA_LM__MAX_TOKENS="48")
    out = tmp_path / "run"
    rows_file = out / "predictions.jsonl"
    cmd = [sys.executable, "-m", "hqa.cli", "evaluate", "--program", "closedbook", "--dataset", "compmix/test",
           "--limit", str(LIMIT), "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                            preexec_fn=default_sigint)
    err, stopped_after = interrupt_when(
        proc, lambda: rows_file.exists() and len(rows_file.read_text().splitlines()) >= 3, "the evaluation")
    assert proc.returncode == 130, err[-2000:]
    assert "hqa: interrupted" in stderr_lines(err) and "Traceback" not in err
    assert stopped_after < 30  # only the question in flight finishes, the queue is dropped
    lines = rows_file.read_text().splitlines()
    assert 3 <= len(lines) < LIMIT
    first_rows = [json.loads(line) for line in lines]  # only complete lines
    assert len({r["id"] for r in first_rows}) == len(first_rows)

    again = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert again.returncode == 0, again.stderr[-2000:]
    final = rows_file.read_text().splitlines()
    assert final[: len(lines)] == lines  # earlier rows kept as they were
    new_rows = [json.loads(line) for line in final[len(lines):]]
    assert len(new_rows) == LIMIT - len(lines)  # only the missing questions were asked
    assert {r["id"] for r in new_rows}.isdisjoint(r["id"] for r in first_rows)
    assert sum(r["lm_calls"] for r in new_rows) < LIMIT  # fewer LM calls than a full run (one per question)

"""``hqa serve``: the FastAPI app with DummyLM (TestClient), and one real uvicorn process on 127.0.0.1 with the
embedded LM, checked over HTTP and in headless Chromium."""

from __future__ import annotations

import json
import logging
import threading
import time

import dspy
import pytest
from dspy.utils import DummyLM
from fastapi.testclient import TestClient

from hqa.app import OpenedProgram, open_program
from hqa.serve import ServeOptions, create_app

Q = "Who is the author of Animal Farm?"


@pytest.fixture()
def dummy_lm():
    lm = DummyLM({"Animal Farm": {"answer": "George Orwell"}, "Gabon": {"answer": "Libreville"}})
    dspy.configure(lm=lm, adapter=dspy.ChatAdapter())
    yield lm
    dspy.configure(lm=None)


@pytest.fixture()
def simple_app(settings_for, dummy_lm):
    """The `simple` program (closed book + one retrieval hop) over the real session pack, answered by DummyLM."""
    opened = open_program(settings_for(), program="simple", configure=False)
    return opened, create_app(opened, programs=lambda: [{"name": "x-compiled"}])


def test_ask_answers_with_trace_and_logs(simple_app, dummy_lm, caplog):
    opened, app = simple_app
    with caplog.at_level(logging.INFO, logger="hqa.access"), TestClient(app) as client:
        assert client.get("/healthz").json()["status"] == "ready"
        r = client.post("/v1/ask", json={"question": Q}, headers={"x-request-id": "req-1"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["answer"] == "George Orwell" and body["program"] == "simple" and body["request_id"] == "req-1"
    t = body["trace"]
    assert t["answers"]["parametric"] == "George Orwell"
    assert {e["source"] for e in t["evidence"]} >= {"text", "sparql"}  # real dense + SPARQL over the pack
    assert any("wd:Q1396889" in q["query"] for q in t["sparql"])
    lines = [json.loads(rec.getMessage()) for rec in caplog.records if rec.name == "hqa.access"]
    ask = [x for x in lines if x["path"] == "/v1/ask"]
    assert ask and ask[0]["status"] == 200 and ask[0]["request_id"] == "req-1" and ask[0]["method"] == "POST"
    assert dummy_lm.history == []  # asked with DSPy's LM history off, as hqa evaluate asks


def test_programs_and_openapi(simple_app):
    _, app = simple_app
    with TestClient(app) as client:
        progs = client.get("/v1/programs").json()
        spec = client.get("/openapi.json").json()
        page = client.get("/")
    assert progs["served"]["label"] == "simple" and "humaniq" in progs["builtin"]
    assert progs["compiled"] == [{"name": "x-compiled"}]
    assert "/v1/ask" in spec["paths"] and "/healthz" in spec["paths"]
    assert page.status_code == 200 and 'id="evidence"' in page.text


@pytest.mark.parametrize("payload,status,reason", [
    (json.dumps({"question": "   "}).encode(), 422, "question is empty"),
    (json.dumps({"question": "x" * 1001}).encode(), 422, "limit is 1000"),
    (b'{"question": "caf\xe9?"}', 400, "not valid UTF-8 JSON"),
    (b'{"question": ', 422, "not valid UTF-8 JSON"),
    (b'["Who?"]', 422, "must be a JSON object"),
    (json.dumps({"question": 3}).encode(), 422, "question: Input should be a valid string"),
    (json.dumps({"q": "Who?"}).encode(), 422, "question: Field required"),
    (json.dumps({"question": "Who?", "k": 9}).encode(), 422, "k: Extra inputs"),
])
def test_bad_input_is_a_one_line_4xx(simple_app, payload, status, reason):
    _, app = simple_app
    with TestClient(app) as client:
        r = client.post("/v1/ask", content=payload, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert reason in err and "\n" not in err


def test_per_request_options_apply_to_that_request_only(simple_app):
    opened, app = simple_app
    with TestClient(app) as client:
        listed = client.get("/v1/programs").json()["served"]["options"]
        small = client.post("/v1/ask", json={"question": Q, "options": {"k": 1}})
        default = client.post("/v1/ask", json={"question": Q})
    assert listed["k"] == ["int", 1, 50] and listed["answer_mode"][0] == "str"
    assert small.status_code == 200 and default.status_code == 200, (small.text, default.text)
    assert len(small.json()["trace"]["evidence"]) == 1
    assert len(default.json()["trace"]["evidence"]) == opened.program.k == 6  # the served program is unchanged


@pytest.mark.parametrize("options,reason", [
    ({"hops": 3}, "'hops' is not an option of program SimpleHybrid"),
    ({"k": "3"}, "'k' must be int, got str"),
    ({"k": True}, "'k' must be int, got bool"),
    ({"k": 0}, "'k' must be between 1 and 50, got 0"),
    ({"answer_mode": "loud"}, "'answer_mode' must be one of auto, grounded, free"),
    ([1], "options: Input should be a valid dictionary"),
])
def test_bad_options_are_a_one_line_422(simple_app, options, reason):
    _, app = simple_app
    with TestClient(app) as client:
        r = client.post("/v1/ask", json={"question": Q, "options": options})
    assert r.status_code == 422, r.text
    assert reason in r.json()["error"] and "\n" not in r.json()["error"]


def test_lone_surrogate_is_repaired(simple_app):
    _, app = simple_app
    with TestClient(app) as client:
        r = client.post("/v1/ask", content=b'{"question": "Animal Farm \\ud800 author?"}',
                        headers={"content-type": "application/json"})
    assert r.status_code == 200 and "\ufffd" in r.json()["question"]


class Gate:
    """A program that blocks until released (to fill the pool) or raises what it is told to."""

    def __init__(self, raise_exc: BaseException | None = None):
        self.release = threading.Event()
        self.started = threading.Semaphore(0)
        self.raise_exc = raise_exc

    def __call__(self, question):
        self.started.release()
        if self.raise_exc is not None:
            raise self.raise_exc
        self.release.wait(10)
        return dspy.Prediction(answer=f"echo {question}", trace={"program": "gate"})


def gate_app(gate, **opts):
    return create_app(OpenedProgram(gate, label="gate", kind="gate", source="program"), options=ServeOptions(**opts))


def test_bounded_pool_refuses_beyond_queue_and_serves_the_rest():
    gate = Gate()
    app = gate_app(gate, workers=1, queue=1)
    results = []
    with TestClient(app) as client:
        def ask(i):
            results.append(client.post("/v1/ask", json={"question": f"q{i}"}))

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        assert gate.started.acquire(timeout=10)  # one running, one waiting: both slots taken
        deadline = time.monotonic() + 10
        while app.state.hqa.inflight < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        busy = client.post("/v1/ask", json={"question": "third"})
        gate.release.set()
        for t in threads:
            t.join(10)
        health = client.get("/healthz").json()
    assert busy.status_code == 503 and "busy" in busy.json()["error"]
    assert sorted(r.json()["answer"] for r in results) == ["echo q0", "echo q1"]
    assert health["served"] == 2


def test_timeout_is_504_and_server_stays_up():
    gate = Gate()
    app = gate_app(gate, workers=2, timeout=0.2)
    with TestClient(app) as client:
        r = client.post("/v1/ask", json={"question": "slow"})
        gate.release.set()
        again = client.post("/v1/ask", json={"question": "fast"})
    assert r.status_code == 504 and "0.2s" in r.json()["error"]
    assert again.status_code == 200 and again.json()["answer"] == "echo fast"


def test_healthz_waits_for_warmup_and_reports_failure():
    gate = Gate()
    release = threading.Event()
    app = create_app(OpenedProgram(gate, label="gate", kind="gate", source="program"), warmup=lambda: release.wait(10))
    with TestClient(app) as client:
        loading = client.get("/healthz")
        early = client.post("/v1/ask", json={"question": "q"})
        release.set()
        deadline = time.monotonic() + 10
        while client.get("/healthz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        ready = client.get("/healthz")
    assert loading.status_code == 503 and loading.json()["status"] == "loading"
    assert early.status_code == 503 and "still loading" in early.json()["error"]
    assert ready.status_code == 200

    def broken():
        raise FileNotFoundError("dense index missing")

    app = create_app(OpenedProgram(gate, label="gate", kind="gate", source="program"), warmup=broken)
    with TestClient(app) as client:
        deadline = time.monotonic() + 10
        while client.get("/healthz").json()["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.02)
        failed = client.get("/healthz")
        ask = client.post("/v1/ask", json={"question": "q"})
    assert failed.status_code == 503 and "dense index missing" in failed.json()["error"]
    assert ask.status_code == 503


def test_api_key_required_on_v1_routes():
    gate = Gate()
    gate.release.set()
    app = gate_app(gate, api_key="s3cret")
    with TestClient(app) as client:
        missing = client.post("/v1/ask", json={"question": "q"})
        wrong = client.post("/v1/ask", json={"question": "q"}, headers={"Authorization": "Bearer nope"})
        basic = client.get("/v1/programs", headers={"Authorization": "Basic s3cret"})
        good = client.post("/v1/ask", json={"question": "q"}, headers={"Authorization": "Bearer s3cret"})
        health = client.get("/healthz")
    assert missing.status_code == wrong.status_code == basic.status_code == 401
    assert "Bearer" in missing.json()["error"] and missing.headers["www-authenticate"] == "Bearer"
    assert good.status_code == 200 and health.status_code == 200

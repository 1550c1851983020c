"""Bounded SPARQL on the embedded store (time, memory, Ctrl-C) and the read-only gate deciding from the parse tree."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import default_sigint

from hqa.retrievers.sparql.backends import OxigraphSparql

REPO = Path(__file__).resolve().parent.parent.parent
RUNAWAY = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l }"
HOG = "SELECT * WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i } ORDER BY ?a ?i ?e"
ONE_HOP = "SELECT ?p ?o WHERE { wd:Q1000 ?p ?o }"


# -- time, memory, reuse ----------------------------------------------------------------------------------------
def test_runaway_query_times_out_and_the_backend_keeps_working(kg):
    backend = OxigraphSparql(kg, timeout=1.0, limit=20)
    try:
        assert backend.run(ONE_HOP).rows
        first = backend.store._all.copy()
        start = time.monotonic()
        res = backend.run(RUNAWAY)
        took = time.monotonic() - start
        assert res.error == "query timed out after 1s", res.error
        assert took < 1.0 + 5  # cut off at the timeout (generous margin for a loaded machine), not after the query
        assert not any(w.alive() for w in first)  # the worker stuck in the query was killed
        assert backend.run(ONE_HOP).rows  # a fresh worker answers the next query
        assert "timed out" in res.error
    finally:
        backend.close()


def test_memory_hungry_query_is_stopped_by_the_memory_bound(kg):
    backend = OxigraphSparql(kg, timeout=120.0, limit=20, memory_mb=200)
    try:
        start = time.monotonic()
        res = backend.run(HOG)
        assert res.error == "query exceeded the memory bound (200 MB)", res.error
        assert time.monotonic() - start < 120  # the bound, not the timeout, stopped it
        assert backend.run(ONE_HOP).rows
    finally:
        backend.close()


SIGINT_SCRIPT = """
import sys, time
from hqa.retrievers.sparql.backends import OxigraphSparql
b = OxigraphSparql(sys.argv[1], timeout=600, limit=5)
b.run("SELECT ?p WHERE { wd:Q1000 ?p ?o }")
print("ready", flush=True)
try:
    b.run(sys.argv[2])
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
print("finished", flush=True)
"""


def test_ctrl_c_interrupts_a_running_query(kg):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", SIGINT_SCRIPT, str(kg), RUNAWAY], stdout=subprocess.PIPE,
                            preexec_fn=default_sigint,
                            text=True, env=env, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(1.0)  # inside the query now
        start = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)  # the parent only (a terminal would signal the whole group)
        rc = proc.wait(timeout=30)
        took = time.monotonic() - start
        assert rc == 130 and proc.stdout.read().strip() == "interrupted"
        assert took < 5  # within about a second; generous for a loaded machine
        # its worker did not outlive it
        out = subprocess.run(["pgrep", "-s", str(proc.pid), "-f", "sparql/worker.py"], capture_output=True, text=True)
        assert out.stdout.strip() == ""
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_rows_from_a_worker_are_json_lines_the_parent_can_read(kg):
    # the protocol: one JSON line per query, materialised in the worker
    proc = subprocess.run([sys.executable, str(REPO / "hqa" / "retrievers" / "sparql" / "worker.py"), str(kg), "3", "0"],
                          input=json.dumps({"q": "SELECT ?s WHERE { ?s ?p ?o }"}) + "\n", capture_output=True,
                          text=True, timeout=60)
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert lines[0] == {"ready": True} and len(lines[1]["rows"]) == 3 and lines[1]["truncated"] is True


# -- prompt size -------------------------------------------------------------------------------------------------
def test_oversized_prompt_is_refused_before_tokenizing():
    from dspy.lm15 import ContextLengthError, Message, Request

    from hqa.lm.models import MAX_BYTES_PER_TOKEN, LlamaCppEngine

    engine = LlamaCppEngine(n_ctx=512)
    huge = Request(model="smollm2", messages=(Message.user("demo " * 2_000_000),))
    start = time.monotonic()
    with pytest.raises(ContextLengthError, match="cannot fit the model's context of 512 tokens"):
        engine.complete(huge)
    assert engine._llama is None and engine.calls == 0  # the model was never loaded, nothing was tokenized
    assert time.monotonic() - start < 30
    engine.check_prompt_size([{"role": "user", "content": "x" * (512 * MAX_BYTES_PER_TOKEN)}])  # the bound itself
    with pytest.raises(ContextLengthError):
        engine.check_prompt_size([{"role": "system", "content": "x" * 400 * MAX_BYTES_PER_TOKEN},
                                  {"role": "user", "content": "y" * 113 * MAX_BYTES_PER_TOKEN}])


ORPHAN_SCRIPT = """
import os, sys, threading, time
from hqa.retrievers.sparql.backends import OxigraphSparql
b = OxigraphSparql(sys.argv[1], timeout=600, limit=5)
threading.Thread(target=b.run, args=(sys.argv[2],), daemon=True).start()
time.sleep(1.0)
print(next(iter(b.store._all)).proc.pid, flush=True)
os._exit(0)  # dies abruptly mid-query: no finalisers, no cleanup
"""


def test_worker_ends_when_its_parent_dies_mid_query(kg):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", ORPHAN_SCRIPT, str(kg), RUNAWAY], capture_output=True, text=True,
                         env=env, timeout=120)
    pid = int(out.stdout.strip())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":  # exited, waiting to be reaped by init
            break
        time.sleep(0.1)
    alive = Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    if alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "the worker outlived its parent"


def test_worker_outlives_the_thread_that_spawned_it(kg):
    import threading

    backend = OxigraphSparql(kg, timeout=5.0, limit=5)
    try:
        backend.store._idle.clear()  # the next query spawns a worker, from a short-lived thread
        results = []
        t = threading.Thread(target=lambda: results.append(backend.run(ONE_HOP)))
        t.start()
        t.join()
        assert results[0].rows
        pids = {w.proc.pid for w in backend.store._all if w.alive()}
        time.sleep(1.0)  # that thread is gone now
        res = backend.run(ONE_HOP)
        assert res.rows, res.error
        assert {w.proc.pid for w in backend.store._all if w.alive()} >= pids  # the same worker served it
    finally:
        backend.close()

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
from hypothesis import given, settings
from hypothesis import strategies as st

from hqa.errors import QueryRejected
from hqa.retrievers.sparql.guard import prepare_query
from hqa.retrievers.sparql.backends import OxigraphSparql

REPO = Path(__file__).resolve().parent.parent.parent
RUNAWAY = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l }"
HOG = "SELECT * WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i } ORDER BY ?a ?i ?e"
ONE_HOP = "SELECT ?p ?o WHERE { wd:Q1000 ?p ?o }"


@pytest.fixture(scope="module")
def kg(built_pack) -> Path:
    return built_pack / "pack" / "kg"


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
        assert "timed out" in res.observation()
    finally:
        backend.close()


def test_worker_is_reused_between_queries(kg):
    backend = OxigraphSparql(kg, timeout=5.0, limit=20)
    try:
        backend.run(ONE_HOP)
        pids = {w.proc.pid for w in backend.store._all}
        for _ in range(5):
            assert backend.run(ONE_HOP).rows
        assert {w.proc.pid for w in backend.store._all} == pids and len(pids) == 1
        limits = Path(f"/proc/{pids.pop()}/limits").read_text()
        cap = next(line.split()[3] for line in limits.splitlines() if line.startswith("Max address space"))
        assert cap != "unlimited" and int(cap) > 1024 * 1024 * 1024  # the store's own size + kg.memory_mb (1024)
    finally:
        backend.close()
    assert not backend.store._all


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


def test_results_match_the_in_process_store(kg):
    isolated = OxigraphSparql(kg, timeout=5.0, limit=7)
    inproc = OxigraphSparql(kg, timeout=5.0, limit=7, isolate=False)
    try:
        for q in (ONE_HOP, "ASK { wd:Q1000 ?p ?o }", "DESCRIBE wd:Q1000", "SELECT ?s WHERE { ?s ?p ?o }",
                  "SELECT ?x WHERE { ?x wdt:P31 ?y FILTER(?y > ) }"):
            a, b = isolated.run(q).to_dict(), inproc.run(q).to_dict()
            a.pop("elapsed_ms"), b.pop("elapsed_ms")
            assert a == b
        assert isolated.run("SELECT ?s WHERE { ?s ?p ?o }").truncated
    finally:
        isolated.close()


def test_missing_store_is_one_clear_error(tmp_path):
    from hqa.errors import PackMissingError

    (tmp_path / "kg").mkdir()
    (tmp_path / "kg" / "CURRENT").write_text("garbage")
    with pytest.raises(PackMissingError, match="cannot open Oxigraph store"):
        OxigraphSparql(tmp_path / "kg")


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


# -- the read-only gate ------------------------------------------------------------------------------------------
READ_WITH_UPDATE_WORDS = [
    "SELECT ?insert WHERE { ?insert ?p ?o }",
    "PREFIX ex: <http://example.org/>\nSELECT ?x WHERE { ?x ex:add ?y }",
    "SELECT ?with ?delete ?load ?clear ?drop ?create ?copy ?move ?add WHERE { ?with ?delete ?load }",
    "PREFIX ex: <http://example.org/>\nASK { ex:drop ex:copy ex:move }",
    "SELECT ?service WHERE { ?service ?p ?o }",
    "SELECT ?x WHERE { ?x wdt:P31 ?y } ORDER BY ?insert",
]


@pytest.mark.parametrize("query", READ_WITH_UPDATE_WORDS)
def test_update_words_as_names_pass_the_gate(query):
    form, full = prepare_query(query)
    assert form in ("SELECT", "ASK")


@pytest.mark.parametrize("query,op", [
    ("INSERT DATA { <urn:a> <urn:b> <urn:c> }", "INSERT DATA"),
    ("DELETE DATA { <urn:a> <urn:b> <urn:c> }", "DELETE DATA"),
    ("DELETE WHERE { ?s ?p ?o }", "DELETE WHERE"),
    ("INSERT { ?s <urn:p> 1 } WHERE { ?s ?p ?o }", "INSERT"),
    ("WITH <urn:g> DELETE { ?s ?p ?o } WHERE { ?s ?p ?o }", "WITH DELETE"),
    ("LOAD <http://127.0.0.1:9/x>", "LOAD"), ("CLEAR ALL", "CLEAR"), ("DROP GRAPH <urn:g>", "DROP"),
    ("CREATE GRAPH <urn:g>", "CREATE"), ("ADD DEFAULT TO <urn:g>", "ADD"), ("MOVE DEFAULT TO <urn:g>", "MOVE"),
    ("COPY DEFAULT TO <urn:g>", "COPY"), ("PREFIX ex: <urn:x#>\nINSERT DATA { ex:insert ex:add ex:select }", "INSERT"),
])
def test_every_update_form_is_refused_by_name(query, op):
    with pytest.raises(QueryRejected, match=f"refused: SPARQL update operation {op}"):
        prepare_query(query)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["insert", "add", "delete", "load", "clear", "drop", "create", "move", "copy", "with",
                                 "service", "x"]), min_size=1, max_size=4),
       st.sampled_from(["?", "ex:"]))
def test_reads_named_after_update_keywords_pass(words, sigil):
    names = [f"{sigil}{w}{i}" if i else f"{sigil}{w}" for i, w in enumerate(words)]
    prefix = "PREFIX ex: <http://example.org/>\n"
    var = "?v"
    triple = " ".join((names + [var, var])[:3]) if sigil == "ex:" else " ".join((names * 3)[:3])
    projection = var if sigil == "ex:" else " ".join(dict.fromkeys(names))
    query = f"{prefix}SELECT {projection} WHERE {{ {triple} }}"
    assert prepare_query(query)[0] == "SELECT"


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

"""``--engine ray`` (hqa.jobs.ray_engine, issue 55) on the session's local Ray of 2 CPUs (``ray_cluster``), its
workers reading the KG through hqa's loopback Oxigraph server (``oxigraph serve-read-only`` over the session pack:
one world shared by the cluster, not a copy per worker: ``pack_sparql``) and asking the loopback LM stand-in
(standins/openai_lm.py, ``entity_lm``):
an evaluation and a small study give the rows the threads engine gives; a worker killed mid-run loses and repeats no
question, and a resume after it asks nothing again; a budget stops the run across both workers with its rows kept.

One engine (two workers) is shared by the module's tests, as a cluster is by a user's jobs: each worker opens a
program the first time a question of it arrives."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from hqa.errors import HQAError

PROGRAM_EQUAL_FIELDS = ("answer", "abstained", "scores", "demos", "error", "lm_calls", "tool_calls", "fallback")


@pytest.fixture(scope="module")
def tracking(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('ray-mlflow') / 'mlflow.db'}"


@pytest.fixture()
def make_settings(settings_for, entity_lm, pack_sparql, tracking):
    def make(api_base: str = entity_lm.api_base, **more):
        return settings_for(lm_provider="openai_compatible", lm_api_base=api_base, lm_model="standin",
                            lm_cache=False, kg_kind="sparql", kg_endpoint=pack_sparql, tracking_uri=tracking, **more)

    return make


@pytest.fixture()
def settings(make_settings):
    return make_settings()


@pytest.fixture(scope="module")
def engine(ray_cluster):
    from hqa.jobs.ray_engine import RayEngine

    with RayEngine(workers=2, threads=4) as shared:
        yield shared


def _plain(value, key=""):
    """A row's trace without what differs from run to run (timings) and float noise past 4 decimals (the workers'
    ONNX embedder runs on other threads than the driver's)."""
    if isinstance(value, dict):
        return {k: _plain(v, k) for k, v in value.items() if k != "ms" and not k.endswith(("_ms", "seconds"))}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return round(value, 4)
    return value


def _same_rows(rows_a: list[dict], rows_b: list[dict]) -> None:
    a, b = {r["id"]: r for r in rows_a}, {r["id"]: r for r in rows_b}
    assert a.keys() == b.keys() and len(a) == len(rows_a) == len(rows_b)
    for qid in a:
        for name in PROGRAM_EQUAL_FIELDS:
            assert a[qid].get(name) == b[qid].get(name), (qid, name, a[qid].get(name), b[qid].get(name))
        # the rest too (gold, trace, prompts, tokens) but the stand-in's prefix-cache hits, which depend on what it
        # was asked before (the other engine's run)
        assert _plain({**a[qid], "cached_prompt_tokens": 0}) == _plain({**b[qid], "cached_prompt_tokens": 0}), qid


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_evaluate_on_ray_gives_the_rows_of_threads(settings, engine, tmp_path):
    """The HumanIQ agent (per-question human demos, SPARQL over the loopback server) on compmix/test."""
    from hqa.jobs.evaluate import run_evaluate_job

    kw = dict(program="humaniq", limit=6, threads=4, progress=False)
    threads = run_evaluate_job(settings, "compmix/test", out=tmp_path / "threads", **kw)
    ray = run_evaluate_job(settings, "compmix/test", out=tmp_path / "ray", engine=engine, **kw)
    rows_t, rows_r = _lines(threads.folder / "predictions.jsonl"), _lines(ray.folder / "predictions.jsonl")
    _same_rows(rows_t, rows_r)
    assert all(r["demos"] for r in rows_r)  # the workers' prompts held the human processes chosen per question
    assert any(q["rows"] for r in rows_r for q in r["trace"]["sparql"])  # the shared KG answered the workers
    assert len({r["answer"] for r in rows_r}) > 1  # answers follow the question, so a mix-up would show
    assert threads.summary.metrics == ray.summary.metrics
    info = json.loads((ray.folder / "run-info.json").read_text())
    assert info["mlflow_run_id"] == ray.run_id


def test_a_small_study_on_ray_gives_the_rows_of_threads(settings, engine, tmp_path):
    """Three cells (the agent uncompiled, the agent compiled with one labeled human demo — saved in its cell's folder
    for the workers to load — and closedbook) over one dataset, on both engines."""
    from hqa.jobs.study import run_study
    from hqa.schemas.study import load_study

    path = tmp_path / "study.toml"
    path.write_text(f"""
[study]
name = "on-ray"
threads = 4

[[program]]
name = "humaniq"
arms = ["none", "labeled-human@1"]
train_limit = 4

[[program]]
name = "closedbook"

[[dataset]]
spec = "compmix/test"
limit = 3

[[lm]]
name = "standin"
provider = "openai_compatible"
model = "standin"
api_base = "{settings.lm.api_base}"
""")
    study = load_study(path)
    threads = run_study(settings, study, path=str(path), out=tmp_path / "threads", progress=False)
    ray = run_study(settings, study, path=str(path), out=tmp_path / "ray", progress=False, engine=engine)
    assert not threads.failed and not ray.failed
    compiled = 0
    for cell_t, cell_r in zip(threads.cells, ray.cells):
        assert cell_t.cell.id == cell_r.cell.id
        _same_rows(_lines(cell_t.folder / "predictions.jsonl"), _lines(cell_r.folder / "predictions.jsonl"))
        if cell_r.cell.compiled:
            compiled += 1
            assert (cell_r.folder / "program" / "manifest.json").exists()  # what the workers loaded
            demos = [r["demos"] for r in _lines(cell_r.folder / "predictions.jsonl")]
            # the compiled arm's one labeled human process, the same for every question
            assert all(d["react"] == demos[0]["react"] and len(d["react"]) == 1 for d in demos)
    assert compiled == 1


def test_compare_and_batch_on_ray_give_the_rows_of_threads(settings, engine, tmp_path):
    """``hqa compare``'s arm (the closed-book program bootstrapped here, saved beside its rows for the workers to
    load) and ``hqa batch``'s questions, on both engines."""
    import dspy

    from hqa.jobs.batch import run_batch
    from hqa.jobs.compare import compare
    from hqa.jobs.engine import ProgramSpec
    from hqa.optimize.compile import CompileOptions
    from hqa.schemas.run_folder import CompareFolder

    base = CompileOptions(program="closedbook", train="compmix/dev", dev="compmix/test", train_limit=3, dev_limit=3,
                          metric="em", max_bootstrapped_demos=1, max_labeled_demos=1, threads=2)
    for name, engine_of in (("threads", "threads"), ("ray", engine)):
        compare(settings, base, arms=("bootstrap",), out_dir=tmp_path / f"cmp-{name}", engine=engine_of)
    rows = _lines(CompareFolder(tmp_path / "cmp-ray").arm_rows("bootstrap"))
    _same_rows(_lines(CompareFolder(tmp_path / "cmp-threads").arm_rows("bootstrap")), rows)
    assert all(any(r["demos"].values()) for r in rows)  # the compiled program's demos reached the workers
    assert (CompareFolder(tmp_path / "cmp-ray").arm_program("bootstrap") / "manifest.json").exists()

    spec = ProgramSpec.of(settings, program="closedbook")
    program, lm, adapter = spec.open()
    questions = [{"id": f"b{i}", "question": q} for i, q in enumerate(["Where is Lima?", "Who wrote Animal Farm?",
                                                                      "What is the capital of Gabon?"])]
    with dspy.context(lm=lm, adapter=adapter):
        run_batch(program, questions, tmp_path / "threads.jsonl", threads=2)
        run_batch(program, questions, tmp_path / "ray.jsonl", threads=2, engine=engine, spec=spec)
    batch = _lines(tmp_path / "ray.jsonl")
    _same_rows(_lines(tmp_path / "threads.jsonl"), batch)
    assert len({r["answer"] for r in batch}) == 3


def test_a_worker_killed_mid_run_loses_and_repeats_no_question(make_settings, engine, tmp_path):
    """One worker's process is killed (SIGKILL) once the run has rows: its questions in flight are asked again by
    the other worker and its replacement; every question has exactly one line; a resume then asks nothing."""
    from standins.openai_lm import Behaviour, start

    from hqa.jobs.evaluate import run_evaluate_job

    slow = start(Behaviour(latency=0.4))
    try:
        settings = make_settings(slow.api_base)
        out = tmp_path / "run"
        engine.start()
        victim = engine.pids()[0]
        replaced = engine.replaced

        def kill_when_rows():
            rows = out / "predictions.jsonl"
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if rows.exists() and len(rows.read_text().splitlines()) >= 2:
                    os.kill(victim, signal.SIGKILL)
                    return
                time.sleep(0.05)

        killer = threading.Thread(target=kill_when_rows, daemon=True)
        killer.start()
        done = run_evaluate_job(settings, "compmix/test", program="simple", limit=12, threads=4, out=out,
                                progress=False, engine=engine)
        killer.join(timeout=5)
        lines = _lines(out / "predictions.jsonl")
        assert engine.replaced == replaced + 1 and victim not in engine.pids()  # it died and was replaced
        assert len(lines) == 12 and len({r["id"] for r in lines}) == 12 and done.summary.n == 12
        assert not any(r["error"] for r in lines)
        again = run_evaluate_job(settings, "compmix/test", program="simple", limit=12, threads=4, out=out,
                                 progress=False, engine=engine)
        assert _lines(out / "predictions.jsonl") == lines and again.summary.n == 12  # nothing asked twice
    finally:
        slow.stop()


def test_the_budget_stops_the_run_across_workers_with_the_rows_kept(settings, engine, tmp_path):
    """An LM-call budget of 7 over two workers answering 2-call questions: exactly 7 requests are granted, no
    question starts after the refusal, the finished rows are kept, and the same run without the budget completes
    every question once."""
    from hqa.jobs.budget import Budget, BudgetReached
    from hqa.jobs.evaluate import run_evaluate_job

    out = tmp_path / "run"
    budget = Budget(max_lm_calls=7)
    with pytest.raises(BudgetReached) as stop:
        run_evaluate_job(settings, "compmix/test", program="simple", limit=10, threads=4, out=out, progress=False,
                         engine=engine, budget=budget)
    kept = _lines(out / "predictions.jsonl")
    assert budget.lm_calls == 7  # every granted request counted, none past the limit
    assert 1 <= len(kept) <= 3 and sum(r["lm_calls"] for r in kept) <= 7
    assert stop.value.run is not None and stop.value.run.summary.n == len(kept)
    done = run_evaluate_job(settings, "compmix/test", program="simple", limit=10, threads=4, out=out,
                            progress=False, engine=engine)
    lines = _lines(out / "predictions.jsonl")
    assert done.summary.n == 10 and len(lines) == 10 and len({r["id"] for r in lines}) == 10
    assert [r for r in lines if r["id"] in {k["id"] for k in kept}] == kept  # the stopped run's rows kept as they were


def test_a_program_the_workers_cannot_open_is_one_clear_error(settings, engine, tmp_path):
    from hqa.jobs.engine import ProgramSpec, Question, RunRows

    spec = ProgramSpec.of(settings, load=tmp_path / "no-such-program")
    import dspy

    question = Question(None, dspy.Example(id="q1", question="Who?").with_inputs("question"), RunRows(None),
                        spec=spec)
    with pytest.raises(HQAError, match="could not open the program: .*no compiled program at"):
        engine.run([question])


def test_traces_of_the_same_sampled_share_with_either_engine(make_settings, engine, tmp_path):
    """``--trace`` with ``tracking.trace_share = 0.5``: both engines keep a trace of the same half of the questions
    (drawn by id), each attached to its evaluation's MLflow run and tagged with the program; the workers wrote
    theirs into the job's store themselves."""
    import mlflow

    from hqa.jobs.evaluate import run_evaluate_job
    from hqa.tracking.runs import TraceSpec

    settings = make_settings(tracking_trace_share=0.5)
    kw = dict(program="closedbook", limit=12, threads=4, progress=False, traces=True)
    runs = {"threads": run_evaluate_job(settings, "compmix/test", out=tmp_path / "threads", **kw),
            "ray": run_evaluate_job(settings, "compmix/test", out=tmp_path / "ray", engine=engine, **kw)}
    share = TraceSpec.of(settings, None)
    traced = {}
    for name, done in runs.items():
        mlflow.set_tracking_uri(settings.tracking_uri)
        found = [t for t in mlflow.search_traces(run_id=done.run_id, return_type="list")
                 if t.info.tags.get("hqa.program") == "closedbook"]
        assert all(t.info.request_metadata.get("mlflow.sourceRun") == done.run_id for t in found)
        traced[name] = sorted(json.loads(t.data.request)["question"] for t in found)
    rows = _lines(runs["ray"].folder / "predictions.jsonl")
    expected = sorted(r["question"] for r in rows if share.sampled(r["id"]))
    assert 0 < len(expected) < len(rows)  # a share, not all or none
    assert traced["threads"] == traced["ray"] == expected
    assert engine.traces is None  # the shared engine's traces were this job's only


def test_workers_the_cluster_cannot_hold_are_one_clear_error(engine, monkeypatch):
    """More workers than the cluster's CPUs is refused at once; workers that wait for CPUs other work holds (the
    shared engine's two workers hold both) are given up on after START_SECONDS, with why."""
    from hqa.errors import ConfigError
    from hqa.jobs import ray_engine

    with pytest.raises(ConfigError, match="--workers 3 needs 3 CPUs; the Ray cluster has 2"):
        ray_engine.RayEngine(workers=3).start()
    engine.start()
    monkeypatch.setattr(ray_engine, "START_SECONDS", 3.0)
    waiting = ray_engine.RayEngine(workers=1)
    with pytest.raises(HQAError, match="did not start within 3 s: the cluster has 2 CPUs, 0 free"):
        waiting.start()
    assert not waiting.slots

"""Cost and time before and after a run (issue 38): the estimate line (from a dry run kept in the run, or from an
earlier run's rows), ``--max-cost`` at the price table's prices, one budget for every command — against the loopback
OpenAI-compatible LM stand-in (standins/openai_lm.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from standins.openai_lm import Behaviour


def calls(server) -> int:
    return httpx.get(server.api_base.replace("/v1", "/admin/stats")).json()["calls"]


def examples(n: int):
    import dspy

    return [dspy.Example(id=str(i), question=f"Question number {i}?", answers=["x"], answer_ids=[]).with_inputs(
        "question") for i in range(n)]


def standin_lm(server, model: str = "standin"):
    import dspy

    return dspy.LM(f"openai/{model}", api_base=server.api_base, api_key="x", cache=False, num_retries=0)


def test_dry_run_rows_count_toward_the_run_and_the_estimate_comes_before_the_rest(server, tmp_path):
    """The estimate is measured on the first 2 questions, whose rows are kept: 5 questions cost 5 questions' LM
    calls, not 7, and the estimate is made before the other 3 are asked."""
    import dspy

    from hqa.jobs.evaluate import evaluate
    from hqa.schemas.run_folder import read_rows
    from hqa.programs.closedbook import ClosedBook

    out = tmp_path / "run" / "predictions.jsonl"
    seen = []

    def estimate(prof, left, source):
        seen.append((prof, left, source, calls(server), len(read_rows(out))))

    with dspy.context(lm=standin_lm(server), adapter=dspy.ChatAdapter()):
        summary = evaluate(ClosedBook(), examples(5), threads=2, out=out, estimate=estimate)
    assert summary.n == 5 and len(seen) == 1
    prof, left, source, calls_then, rows_then = seen[0]
    assert left == 3 and rows_then == 2 and calls_then == 2 and "dry run of 2 questions" in source
    assert prof["lm_calls"] == 1 and prof["prompt_tokens"] > 0 and prof["completion_tokens"] > 0
    assert calls(server) == 5 and len(out.read_text().splitlines()) == 5


def test_a_resumed_run_estimates_from_the_earlier_rows_without_a_dry_run(server, tmp_path):
    import dspy

    from hqa.jobs.evaluate import evaluate
    from hqa.programs.closedbook import ClosedBook

    out = tmp_path / "run" / "predictions.jsonl"
    seen = []
    with dspy.context(lm=standin_lm(server), adapter=dspy.ChatAdapter()):
        evaluate(ClosedBook(), examples(2), out=out)
        before = calls(server)
        evaluate(ClosedBook(), examples(4), out=out, estimate=lambda p, left, s: seen.append((p, left, s)))
    assert [(left, s.startswith("measured on 2 earlier rows")) for _, left, s in seen] == [(2, True)]
    assert calls(server) == before + 2


def test_cost_budget_stops_evaluate_with_the_rows_kept_and_a_rerun_resumes(server, tmp_path):
    import dspy

    from hqa.jobs.budget import Budget, BudgetReached, price_for
    from hqa.config import LMConfig
    from hqa.jobs.evaluate import evaluate
    from hqa.schemas.run_folder import read_rows
    from hqa.programs.closedbook import ClosedBook

    out = tmp_path / "run" / "predictions.jsonl"
    budget = Budget(max_cost=1e-9, price=price_for(LMConfig(provider="openai", model="gpt-4o-mini")))
    # each call takes a moment, so both workers are asking when the first row reaches the budget
    server.state.behaviour = Behaviour(latency=0.5)
    with dspy.context(lm=standin_lm(server), adapter=dspy.ChatAdapter()):
        with pytest.raises(BudgetReached, match=r"cost budget of \$1e-09 reached \(\$0\.0\d+ spent at gpt-4o-mini "
                                                r"prices\) after 2 of 4 questions"):
            evaluate(ClosedBook(), examples(4), out=out, budget=budget, threads=2)
        # the question in flight on the other worker finished and its row is kept (it was paid for); the queued
        # two were never started
        assert sorted(r["id"] for r in read_rows(out)) == ["0", "1"]
        stopped = calls(server)
        assert stopped == 2
        summary = evaluate(ClosedBook(), examples(4), out=out)
    assert summary.n == 4 and calls(server) == stopped + 2


def _env(server, tmp_path, model="standin", tracking: str | None = None, price=None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    # the stand-in's spelling named: the response-format probe's own requests are not counted in calls()
    env.update(HQA_LM__PROVIDER="openai_compatible", HQA_LM__API_BASE=server.api_base, HQA_LM__MODEL=model,
               HQA_LM__CACHE="false", HQA_LM__RESPONSE_FORMAT="json_schema",
               HQA_PATHS__ARTIFACTS=str(tmp_path / "artifacts"))
    if tracking:
        env["HQA_TRACKING__URI"] = tracking
    if price:
        env.update(HQA_LM__PRICE_IN=price[0], HQA_LM__PRICE_OUT=price[1])
    return env


def _cli(server, tmp_path, *extra, model="standin", tracking: str | None = None, price=None):
    env = _env(server, tmp_path, model, tracking, price)
    cmd = [sys.executable, "-m", "hqa.cli", "evaluate", "--program", "closedbook", "--dataset", "compmix/test",
           "--limit", "3", "--out", str(tmp_path / "run"), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


def test_cli_evaluate_prints_one_estimate_line_and_no_estimate_turns_it_off(server, tmp_path):
    proc = _cli(server, tmp_path, "--max-cost", "100", model="gpt-4o-mini")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("hqa: estimate for")]
    assert len(lines) == 1 and "(dry run of 2 questions, kept in this run)" in lines[0], proc.stderr
    assert "1 questions left" in lines[0] and "at gpt-4o-mini prices" in lines[0] and "--threads 1" in lines[0]
    assert calls(server) == 3
    quiet = _cli(server, tmp_path, "--fresh", "--no-estimate")
    assert quiet.returncode == 0 and "hqa: estimate" not in quiet.stderr, quiet.stderr[-2000:]


def test_cli_max_cost_with_an_unpriced_model_is_one_error_line_before_any_lm_call(server, tmp_path):
    proc = _cli(server, tmp_path, "--max-cost", "1")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("hqa:")]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert len(errors) == 1 and "--max-cost needs the LM's price" in errors[0], proc.stderr
    assert calls(server) == 0 and not (tmp_path / "run" / "predictions.jsonl").exists()


# -- compile and compare: the optimizer's own LM requests are charged and refused past the budget ---------------------
@pytest.fixture()
def settings(built_pack, tmp_path):
    """Settings on the session pack with this test's own artifacts folder (programs and runs of other tests are not
    this test's earlier compiles)."""
    from pathlib import Path

    from hqa.config import load_settings

    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    (artifacts / "pack").symlink_to(built_pack / "pack")
    return load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(artifacts),
                         tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")


def compile_opts(**kw):
    from hqa.optimize.compile import CompileOptions

    base = dict(program="closedbook", optimizer="bootstrap", train="compmix/dev", dev="humaniq-compmix",
                train_limit=6, dev_limit=3, metric="never", max_bootstrapped_demos=2)
    base.update(kw)
    return CompileOptions(**base)


class CountingLM:
    """DemoSensitiveLM (conftest) with a count of the requests that reached it."""

    def __new__(cls):
        from conftest import DemoSensitiveLM

        class Counted(DemoSensitiveLM):
            requests = 0

            def reply(self, messages):
                type(self).requests += 1
                return super().reply(messages)

        return Counted(chain=False)


def test_compile_stops_at_the_lm_call_budget_inside_the_optimizer_and_saves_nothing(settings, monkeypatch):
    """Bootstrap asks the program on every train question (the metric never accepts one): the 4th request is
    refused, the optimizer does not carry on past it, and no program folder is written."""
    import dspy

    from hqa.jobs.budget import Budget, BudgetReached
    from hqa.scoring.metrics import METRICS
    from hqa.jobs.compile import compile_and_save

    monkeypatch.setitem(METRICS, "never", lambda example, pred, trace=None: False)
    lm = CountingLM()
    budget = Budget(max_lm_calls=3)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        with pytest.raises(BudgetReached, match=r"LM-call budget of 3 reached while compiling cb-boot \(3 LM calls\); "
                                                "nothing was saved to artifacts/programs"):
            compile_and_save(settings, compile_opts(), name="cb-boot", budget=budget)
    assert type(lm).requests == 3
    assert not (settings.artifacts_dir / "programs" / "cb-boot").exists()


def test_compile_charges_the_dev_evaluation_to_the_same_budget(settings, monkeypatch):
    import dspy

    from hqa.jobs.budget import Budget, BudgetReached
    from hqa.scoring.metrics import METRICS
    from hqa.jobs.compile import compile_and_save

    monkeypatch.setitem(METRICS, "never", lambda example, pred, trace=None: False)
    budget = Budget(max_lm_calls=7)  # 6 train questions asked by bootstrap, then 1 of the 3 dev questions
    with dspy.context(lm=CountingLM(), adapter=dspy.ChatAdapter()):
        with pytest.raises(BudgetReached, match="LM-call budget of 7 reached after 1 of 3 questions"):
            compile_and_save(settings, compile_opts(), name="cb-boot", budget=budget)
    assert not (settings.artifacts_dir / "programs" / "cb-boot").exists()


def test_compare_stops_between_arms_with_the_finished_arms_table_written(settings, tmp_path):
    import dspy

    from hqa.jobs.budget import Budget, BudgetReached
    from hqa.jobs.compare import compare

    out = tmp_path / "cmp"
    lm = CountingLM()
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        # arm none: 3 dev questions (3 calls); arm bootstrap: its optimizer's 2nd request is past the budget of 4
        with pytest.raises(BudgetReached, match=r"while compiling arm bootstrap \(4 LM calls\).*the arm that "
                                                "finished is in"):
            compare(settings, compile_opts(optimizer="none", metric="em"), arms=("none", "bootstrap"), out_dir=out,
                    budget=Budget(max_lm_calls=4))
    assert type(lm).requests == 4
    table = (out / "table.md").read_text()
    assert "| none |" in table and "| bootstrap |" not in table
    assert len((out / "none.jsonl").read_text().splitlines()) == 3


def test_compare_stops_within_an_arm_with_its_rows_so_far_kept(settings, tmp_path):
    import dspy

    from hqa.jobs.budget import Budget, BudgetReached
    from hqa.jobs.compare import compare

    out = tmp_path / "cmp"
    with dspy.context(lm=CountingLM(), adapter=dspy.ChatAdapter()):
        with pytest.raises(BudgetReached, match="LM-call budget of 2 reached after 2 of 3 questions"):
            compare(settings, compile_opts(optimizer="none", metric="em"), arms=("none", "bootstrap"), out_dir=out,
                    budget=Budget(max_lm_calls=2))
    assert len((out / "none.jsonl").read_text().splitlines()) == 2


def test_compile_estimates_from_a_dry_run_then_from_the_earlier_compile(settings, monkeypatch):
    """The first compile measures 2 dev questions of the uncompiled program (charged to the budget); a second compile
    of the same name measures the first one's dev rows and asks nothing extra.  Bootstrap's optimizer questions are
    counted (one at a time) beside the dev questions."""
    import dspy

    from hqa.jobs.budget import Budget
    from hqa.scoring.metrics import METRICS
    from hqa.jobs.compile import compile_and_save

    monkeypatch.setitem(METRICS, "never", lambda example, pred, trace=None: False)
    seen = []
    lm = CountingLM()
    budget = Budget(max_lm_calls=100)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        compile_and_save(settings, compile_opts(), name="cb-boot", budget=budget,
                         estimate=lambda *a, **kw: seen.append((a, kw, type(lm).requests)))
        assert type(lm).requests == 2 + 6 + 3 and budget.lm_calls == 11  # dry run, bootstrap, dev evaluation
        compile_and_save(settings, compile_opts(), name="cb-boot", budget=budget, force=True,
                         estimate=lambda *a, **kw: seen.append((a, kw, type(lm).requests)))
    assert type(lm).requests == 11 + 6 + 3
    (prof, left, source), extra, asked = seen[0]
    assert asked == 2 and left == 3 and extra["serial"] == 6 and prof["lm_calls"] == 1
    assert source.startswith("dry run of 2 dev questions with the uncompiled program, not kept")
    assert "up to 6 optimizer questions (one at a time) + 3 dev questions" in extra["what"]
    (_prof, _left, source), _extra, asked = seen[1]
    assert asked == 11 and source.startswith("measured on 3 dev rows of an earlier compile")


def test_compare_estimate_counts_every_arm_and_bounds_the_search_optimizers_by_hand(settings, tmp_path):
    import dspy

    from hqa.jobs.compare import compare

    seen = []
    with dspy.context(lm=CountingLM(), adapter=dspy.ChatAdapter()):
        compare(settings, compile_opts(optimizer="none", metric="em"), arms=("none", "bootstrap"),
                out_dir=tmp_path / "cmp", estimate=lambda *a, **kw: seen.append((a, kw)))
    [((_prof, left, _source), extra)] = seen
    assert left == 6 and extra["serial"] == 6 and extra["note"] == ""
    from hqa.jobs.budget import estimate_line
    from hqa.jobs.compile import estimate_compile

    lines = []
    estimate_compile(lambda *a, **kw: lines.append(estimate_line("compare x", *a[:2], 4, a[2], **kw)),
                      {"lm_calls": 2.0, "prompt_tokens": 10.0, "cached_prompt_tokens": 0.0, "completion_tokens": 5.0,
                       "seconds": 8.0}, "dry run", ["none", "bootstrap", "mipro"], 6, 3)
    # by hand (DSPy 3.4's call structure, 6 train / 3 dev questions, 1 predictor, 2+2 demos): bootstrap asks ≤ 6
    # train questions one at a time; mipro (auto="light", 6 sets of which 3 are made without asking): 4 bootstraps
    # ≤ 6 each = 24 one at a time, T = int(max(2·2·log2 6, 9)) = 10 trials + the default program on all 3 dev
    # questions (3 ≤ 50: no minibatch) = 33, and 10 + 3·1 + 1 + 1 = 15 proposal calls.  LM calls: 2 × (30 + 33 + 9)
    # + 15 = 159; time: 8 s × (30 + (33 + 9)/4 + 15 × ½) = 384 s = 6.4 min
    assert lines == ["hqa: estimate for compare x (dry run): 2.0 LM calls, 10 prompt (0 cached) / 5 completion tokens "
                     "per question; 3 arms: up to 30 optimizer questions (one at a time) + 33 optimizer questions + 9 "
                     "dev questions + 15 proposal calls: ~159 LM calls, ~6.4 min at --threads 4; an upper bound from "
                     "the optimizers' call structure (docs/compiling.md): mipro ≤ 4×6 bootstrap + 3×(10+1) trial "
                     "questions + 15 proposal calls"]


def test_compile_stops_at_the_cost_budget_from_the_providers_usage(server, settings, monkeypatch):
    """The optimizer's requests are priced from the usage the server reports (gpt-4o-mini prices): the request after
    the one that crossed the budget is never sent."""
    import dspy

    from hqa.jobs.budget import Budget, BudgetReached, price_for
    from hqa.config import LMConfig
    from hqa.scoring.metrics import METRICS
    from hqa.jobs.compile import compile_and_save

    monkeypatch.setitem(METRICS, "never", lambda example, pred, trace=None: False)
    budget = Budget(max_cost=1e-9, price=price_for(LMConfig(provider="openai", model="gpt-4o-mini")))
    with dspy.context(lm=standin_lm(server, "gpt-4o-mini"), adapter=dspy.ChatAdapter()):
        with pytest.raises(BudgetReached, match=r"cost budget of \$1e-09 reached \(\$0\.0\d+ spent at gpt-4o-mini "
                                                r"prices\) while compiling cb-boot \(1 LM calls\)"):
            compile_and_save(settings, compile_opts(), name="cb-boot", budget=budget)
    assert calls(server) == 1 and budget.dollars > 0
    assert not (settings.artifacts_dir / "programs" / "cb-boot").exists()


def test_a_compare_stopped_at_the_budget_resumes_with_its_finished_arms(settings, tmp_path, capsys):
    """Rerun with the same arguments after a budget stop, the compare reuses the finished arm's row and JSONL (no LM
    call for it, one line says so) and runs the rest: as many requests as the unfinished arm alone costs."""
    import dspy

    from hqa.jobs.budget import Budget, BudgetReached
    from hqa.jobs.compare import compare

    out, alone = tmp_path / "cmp", tmp_path / "alone"
    lm = CountingLM()
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        with pytest.raises(BudgetReached, match="the same command resumes after them"):
            compare(settings, compile_opts(optimizer="none", metric="em"), arms=("none", "bootstrap"), out_dir=out,
                    budget=Budget(max_lm_calls=4))
        first_none = (out / "none.jsonl").read_text()
        capsys.readouterr()
        before = type(lm).requests
        result = compare(settings, compile_opts(optimizer="none", metric="em"), arms=("none", "bootstrap"),
                         out_dir=out)
        resumed_calls = type(lm).requests - before
        before = type(lm).requests
        compare(settings, compile_opts(optimizer="none", metric="em"), arms=("bootstrap",), out_dir=alone)
        alone_calls = type(lm).requests - before
    assert f"hqa: compare resumes {out}: 1 finished arm reused (none), 1 to run" in capsys.readouterr().err
    assert resumed_calls == alone_calls > 0
    assert (out / "none.jsonl").read_text() == first_none
    assert [r["arm"] for r in result["rows"]] == ["none", "bootstrap"]
    table = (out / "table.md").read_text()
    assert "| none |" in table and "| bootstrap |" in table and "stopped" not in table


def test_a_compare_interrupted_resumes_in_the_newest_stopped_folder_only_with_the_same_arguments(settings,
                                                                                                monkeypatch, capsys):
    """Ctrl-C in the second arm keeps the first; without --out the rerun finds the stopped folder under
    artifacts/compare; other arguments (a smaller dev set) or ``fresh`` start a new folder."""
    import dspy

    from hqa.jobs import compare as jobs

    real = jobs.compile_program

    def interrupted(opts, *a, **kw):
        if opts.optimizer == "bootstrap":
            raise KeyboardInterrupt
        return real(opts, *a, **kw)

    monkeypatch.setattr(jobs, "compile_program", interrupted)
    lm = CountingLM()
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        with pytest.raises(KeyboardInterrupt):
            jobs.compare(settings, compile_opts(optimizer="none", metric="em"), arms=("none", "bootstrap"))
        [stopped] = list((settings.artifacts_dir / "compare").iterdir())
        assert "| none |" in (stopped / "table.md").read_text()
        capsys.readouterr()
        with pytest.raises(KeyboardInterrupt):  # other arguments: a new compare beside the stopped one
            jobs.compare(settings, compile_opts(optimizer="none", metric="em", dev_limit=2), arms=("none", "bootstrap"))
        assert "compare resumes" not in capsys.readouterr().err
        assert len(list((settings.artifacts_dir / "compare").iterdir())) == 2
        monkeypatch.setattr(jobs, "compile_program", real)
        before = type(lm).requests
        result = jobs.compare(settings, compile_opts(optimizer="none", metric="em"), arms=("none", "bootstrap"))
        assert Path(result["table"]).parent == stopped and type(lm).requests > before
        assert f"compare resumes {stopped}: 1 finished arm reused (none)" in capsys.readouterr().err
        result = jobs.compare(settings, compile_opts(optimizer="none", metric="em"), arms=("none", "bootstrap"),
                              fresh=True)
        assert "compare resumes" not in capsys.readouterr().err
    assert len(list((settings.artifacts_dir / "compare").iterdir())) == 3
    assert Path(result["table"]).parent != stopped


def test_a_compile_rerun_after_a_budget_stop_replays_the_lm_cache_and_pays_only_new_requests(server, settings,
                                                                                            monkeypatch, tmp_path):
    """With DSPy's LM cache on disk (hqa's default, artifacts/cache/dspy), a compile stopped at its budget and run
    again asks the provider only what it had not asked: the replayed requests are not charged, so a budget of the
    remaining requests is enough.  Bootstrap asks 6 train questions, then 3 dev questions: 9 requests."""
    import dspy
    from dspy.clients.cache import Cache

    from hqa.jobs.budget import Budget, BudgetReached
    from hqa.scoring.metrics import METRICS
    from hqa.jobs.compile import compile_and_save

    monkeypatch.setitem(METRICS, "never", lambda example, pred, trace=None: False)
    # on disk only, as in a new process
    monkeypatch.setattr(dspy, "cache", Cache(True, False, str(tmp_path / "dspy-cache"), 10**8))
    # the cache on, as by default; a model name of this run's own, so no earlier run's replies are in DSPy's disk cache
    lm = dspy.LM(f"openai/standin-{tmp_path.name}-{os.getpid()}", api_base=server.api_base, api_key="x", cache=True,
                 num_retries=0)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        with pytest.raises(BudgetReached, match=r"LM-call budget of 4 reached while compiling cb-boot \(4 LM calls\)"):
            compile_and_save(settings, compile_opts(), name="cb-boot", budget=Budget(max_lm_calls=4))
        assert calls(server) == 4
        budget = Budget(max_lm_calls=5)
        result = compile_and_save(settings, compile_opts(), name="cb-boot", budget=budget)
    assert calls(server) == 9 and budget.lm_calls == 5
    assert (settings.artifacts_dir / "programs" / "cb-boot").is_dir() and result["metrics"]


def test_a_compare_over_several_benchmarks_resumes_in_its_stopped_folder(settings, capsys):
    """Stopped in the second benchmark, the same command continues in the same folder: the first benchmark's arm is
    reused (no LM call) and only the second benchmark's questions are asked."""
    import dspy

    from hqa.jobs.budget import Budget, BudgetReached
    from hqa.jobs.compare import compare_benchmarks

    base = compile_opts(optimizer="none", metric="em")
    devs = ("humaniq-compmix", "mintaka")
    lm = CountingLM()
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        with pytest.raises(BudgetReached):  # 3 questions of the first benchmark, then 1 of the second
            compare_benchmarks(settings, base, devs, arms=("none",), budget=Budget(max_lm_calls=4))
        [folder] = list((settings.artifacts_dir / "compare").iterdir())
        capsys.readouterr()
        before = type(lm).requests
        out = compare_benchmarks(settings, base, devs, arms=("none",))
    assert Path(out["table"]).parent == folder and list((settings.artifacts_dir / "compare").iterdir()) == [folder]
    assert type(lm).requests - before == 3
    assert "1 finished arm reused (none), 0 to run" in capsys.readouterr().err
    assert [r["arm"] for r in out["rows"]] == ["none"] and set(out["rows"][0]) >= set(devs)


class ThreeCalls:
    """A program of three LM calls per question (three closed-book predictors in a row)."""

    def __init__(self):
        import dspy

        from hqa.signatures.basic import ClosedBookAnswer

        self.steps = [dspy.Predict(ClosedBookAnswer) for _ in range(3)]

    def named_predictors(self):
        return [(f"step{i}", p) for i, p in enumerate(self.steps)]

    def __call__(self, question: str):
        import dspy

        answers = [p(question=question).answer for p in self.steps]
        return dspy.Prediction(answer=answers[-1], trace={"program": "three", "question": question})


def hqa_engine_lm(server):
    """The stand-in behind hqa's own OpenAI-compatible engine (which says when it sends a request)."""
    from hqa.config import load_settings
    from hqa.lm.models import build_lm

    return build_lm(load_settings(Path("/nonexistent-hqa.toml"), environ={}, lm_provider="openai_compatible",
                                  lm_api_base=server.api_base, lm_model="standin", lm_cache=False, lm_num_retries=0,
                                  lm_response_format="json_schema"))


@pytest.mark.parametrize("engine", ["litellm", "hqa"])
def test_an_lm_call_budget_holds_exactly_with_the_dry_run_charged_and_its_estimate_said_first(server, tmp_path,
                                                                                             engine):
    """--max-lm-calls 7 over three-call questions: the 2-question dry run (6 calls) is charged, its estimate is
    said before the rest, the third question's second request is refused — the LM got exactly 7 requests — and the
    stop carries the summary of the 2 rows written; the cut question has no row and a rerun asks it.  Charged as
    requests start on an LM DSPy's own engine serves, as they are sent on hqa's engine."""
    import dspy

    from hqa.jobs.budget import Budget, BudgetReached
    from hqa.jobs.evaluate import evaluate
    from hqa.schemas.run_folder import read_rows

    out = tmp_path / "run" / "predictions.jsonl"
    said = []

    def estimate(prof, left, source):
        said.append((prof["lm_calls"], left, source, calls(server)))

    estimate.starting = lambda what: said.append(("starting", what, calls(server)))
    lm = standin_lm(server) if engine == "litellm" else hqa_engine_lm(server)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        with pytest.raises(BudgetReached, match="LM-call budget of 7 reached after 2 of 5 questions") as stop:
            evaluate(ThreeCalls(), examples(5), out=out, budget=Budget(max_lm_calls=7), threads=1,
                     estimate=estimate)
    assert calls(server) == 7  # exactly the budget, the refused request never sent
    assert said[0] == ("starting", "asking the first 2 of 5 questions to measure them (a dry run, kept in this run "
                                   "and charged to its budget)", 0)
    assert said[1][:3] == (3.0, 3, "dry run of 2 questions, kept in this run") and said[1][3] == 6
    assert [r["id"] for r in read_rows(out)] == ["0", "1"]
    assert stop.value.summary.n == 2 and stop.value.summary.stopped.startswith("LM-call budget of 7 reached")


def test_a_run_stopped_by_its_budget_is_a_finished_mlflow_run_with_metrics_marked_stopped(server, tmp_path):
    import mlflow

    db = tmp_path / "mlflow.db"
    proc = _cli(server, tmp_path, "--max-lm-calls", "2", "--no-estimate", "--threads", "1",
                tracking=f"sqlite:///{db}")
    assert proc.returncode != 0 and "LM-call budget of 2 reached after 2 of 3 questions" in proc.stderr
    assert "2 questions, 0 errors" in proc.stdout  # the report over the answered rows came first
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{db}")
    run = client.search_runs([client.get_experiment_by_name("hqa").experiment_id])[0]
    assert run.info.status == "FINISHED" and run.data.metrics["eval_n"] == 2
    assert run.data.tags["hqa.stopped"].startswith("LM-call budget of 2 reached")
    listed = subprocess.run([sys.executable, "-m", "hqa.cli", "runs"], capture_output=True, text=True, cwd=tmp_path,
                            env={**_env(server, tmp_path), "HQA_TRACKING__URI": f"sqlite:///{db}"}, timeout=300)
    assert "FINISHED" in listed.stdout and "eval_n=2" in listed.stdout and "stopped" in listed.stdout, listed.stdout


def test_max_cost_works_for_a_self_hosted_model_priced_in_the_settings(server, tmp_path):
    proc = _cli(server, tmp_path, "--max-cost", "0.5", price=("0", "0"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(x for x in proc.stderr.splitlines() if x.startswith("hqa: estimate"))
    assert "~$0.00 at standin prices" in line


def test_compare_arms_are_measured_with_the_lm_cache_off_after_the_estimates_dry_run(server, settings, tmp_path):
    """The estimate's dry run asks the uncompiled program 2 dev questions; the ``none`` arm asks the same prompts.
    With DSPy's cache on, that arm's rows used to report 0 tokens and ~0 s (its replies came from the cache): now
    every arm's dev questions reach the LM, their tokens are their own and no call is counted as cached."""
    import json as _json

    import dspy

    from hqa.jobs.compare import compare

    # the cache on, as by default; a model name of this run's own, so no earlier run's replies are in DSPy's disk cache
    lm = dspy.LM(f"openai/standin-{tmp_path.name}-{os.getpid()}", api_base=server.api_base, api_key="x", cache=True,
                 num_retries=0)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        before = calls(server)
        result = compare(settings, compile_opts(optimizer="none", metric="em", dev_limit=2, train_limit=2),
                         arms=("none",), out_dir=tmp_path / "cmp", estimate=lambda *a, **kw: None)
    rows = [_json.loads(x) for x in (tmp_path / "cmp" / "none.jsonl").read_text().splitlines()]
    assert calls(server) - before == 4  # the dry run's 2 questions, then the arm's own 2: none served by the cache
    assert len(rows) == 2 and all(r["prompt_tokens"] > 0 and r["cached_lm_calls"] == 0 for r in rows)
    [arm] = result["rows"]
    assert arm["prompt_tokens_per_q"] > 0 and arm["cached_lm_calls_per_q"] == 0
    assert "asked with DSPy's LM cache off" in Path(result["table"]).read_text()

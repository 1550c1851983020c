"""The loopback OpenAI-compatible LM stand-in of the benchmarks (standins/openai_lm.py): OpenAI's reply formats
(streamed and not), usage with cached prompt tokens, replies hqa's programs can run on, replay, 429/500 on demand."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from standins.openai_lm import Behaviour, SCRIPTS, messages_key


def chat(server, messages, **extra):
    return httpx.post(server.api_base + "/chat/completions", json={"model": "m", "messages": messages, **extra},
                      timeout=30)


SYSTEM = ("Your input fields are:\n1. `question` (str)\nYour output fields are:\n1. `next_thought` (str)\n"
          "2. `next_tool_name` (str)\n3. `next_tool_args` (str)\n\nAll interactions will be structured ...")


def test_reply_has_the_fields_asked_for_and_follows_the_agent_script_by_step(server):
    first = chat(server, [{"role": "system", "content": SYSTEM},
                          {"role": "user", "content": "[[ ## question ## ]]\nWhat is the capital of Gabon?\n\n"
                                                      "[[ ## trajectory ## ]]\n"}]).json()
    text = first["choices"][0]["message"]["content"]
    assert "[[ ## next_tool_name ## ]]\nWikiSearch" in text and "[[ ## next_tool_args ## ]]\nGabon" in text
    assert text.rstrip().endswith("[[ ## completed ## ]]")
    later = chat(server, [{"role": "system", "content": SYSTEM},
                          {"role": "user", "content": "[[ ## question ## ]]\nWhat is the capital of Gabon?\n\n"
                                                      "[[ ## trajectory ## ]]\nAction: WikiSearch\nAction: X\n"
                                                      "Action: Y\nAction: Z\n"}]).json()
    assert "[[ ## next_tool_name ## ]]\nFinish" in later["choices"][0]["message"]["content"]
    assert first["object"] == "chat.completion" and first["choices"][0]["finish_reason"] == "stop"


def test_usage_counts_a_repeated_prefix_as_cached_in_steps(server):
    long = "word " * 60
    first = chat(server, [{"role": "user", "content": long + "one"}]).json()["usage"]
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    assert first["total_tokens"] == first["prompt_tokens"] + first["completion_tokens"]
    again = chat(server, [{"role": "user", "content": long + "two"}]).json()["usage"]
    cached = again["prompt_tokens_details"]["cached_tokens"]
    # the shared prefix is the role tag + 60 words; hits come from 40 tokens on, in steps of 8
    assert cached >= 40 and (cached - 40) % 8 == 0 and cached < again["prompt_tokens"]
    short = chat(server, [{"role": "user", "content": "a short prompt"}]).json()["usage"]
    assert short["prompt_tokens_details"]["cached_tokens"] == 0  # under the minimum: never cached
    stats = httpx.get(server.api_base.replace("/v1", "/admin/stats")).json()
    assert stats["calls"] == 3 and stats["cached_tokens"] == cached


def test_stream_gives_chunks_then_usage_then_done(server):
    with httpx.stream("POST", server.api_base + "/chat/completions",
                      json={"model": "m", "stream": True, "stream_options": {"include_usage": True},
                            "messages": [{"role": "user", "content": "[[ ## question ## ]]\nWho wrote Dune?"}]}) as r:
        events = [line[len("data: "):] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert "[[ ## answer ## ]]" in text and all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0


def test_faults_on_demand_and_replay(server, tmp_path):
    httpx.post(server.api_base.replace("/v1", "/admin/faults"), json={"status": 429, "count": 1})
    limited = chat(server, [{"role": "user", "content": "hi"}])
    assert limited.status_code == 429 and limited.headers["retry-after"] == "1"
    assert limited.json()["error"]["type"] == "rate_limit_exceeded"
    assert chat(server, [{"role": "user", "content": "hi"}]).status_code == 200  # only the next N calls fail
    server.state.behaviour = Behaviour(latency=0.0, error_rate=1.0, error_status=500)
    assert chat(server, [{"role": "user", "content": "hi"}]).status_code == 500
    recorded = [{"role": "user", "content": "recorded question"}]
    server.state.behaviour = Behaviour(latency=0.0, replay={messages_key(recorded): "[[ ## answer ## ]]\nRecorded"})
    assert chat(server, recorded).json()["choices"][0]["message"]["content"] == "[[ ## answer ## ]]\nRecorded"
    assert "Recorded" not in chat(server, [{"role": "user", "content": "other"}]).json()["choices"][0]["message"][
        "content"]


def test_latency_distributions():
    import random

    rng = random.Random(1)
    assert Behaviour(latency=0.3).delay(rng) == 0.3
    draws = [Behaviour(latency=0.3, distribution="uniform", spread=0.1).delay(rng) for _ in range(200)]
    assert min(draws) >= 0.2 and max(draws) <= 0.4 and len(set(draws)) > 100


def test_hqa_programs_run_to_their_end_on_it(server, pack_toolbox):
    """Each benchmarked program, through DSPy's OpenAI-compatible client, finishes with the scripted answer and the
    agent takes its five scripted steps."""
    import dspy

    from hqa.programs import build_program

    lm = dspy.LM("openai/standin", api_base=server.api_base, api_key="x", cache=False, num_retries=0)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        for name in ("humaniq", "detllm", "sscot", "simple"):
            pred = build_program(name, pack_toolbox)(question="What is the capital of Gabon?")
            assert "Libreville" in str(pred.answer), (name, pred.answer)
    assert len(SCRIPTS["humaniq"]["next_tool_name"]) == 5
    stats = httpx.get(server.api_base.replace("/v1", "/admin/stats")).json()
    assert stats["statuses"] == {"200": stats["calls"]} and stats["calls"] >= 10


def test_evaluate_rows_and_report_count_cached_prompt_tokens(server):
    """The provider's cached prompt tokens (usage.prompt_tokens_details.cached_tokens) reach each predictions row,
    the run's per-question cost and the report's cost table beside the HumanIQ reference."""
    import dspy

    from hqa.config import load_settings
    from hqa.jobs.evaluate import evaluate
    from hqa.lm.models import build_lm
    from hqa.programs.closedbook import ClosedBook
    from hqa.reports.summary import render_markdown, summarize_rows

    examples = [dspy.Example(id=str(i), question=f"What is the capital of country number {i}?", answers=["x"],
                             answer_ids=[]).with_inputs("question") for i in range(3)]
    # the LM hqa builds for an OpenAI-compatible server (DSPy's own engine, hqa.lm.openai_compatible)
    lm = build_lm(load_settings(Path("/nonexistent-hqa.toml"), environ={}, lm_provider="openai_compatible",
                                lm_api_base=server.api_base, lm_model="standin", lm_cache=False, lm_num_retries=0))
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        summary = evaluate(ClosedBook(), examples, threads=1)
    stats = httpx.get(server.api_base.replace("/v1", "/admin/stats")).json()
    rows = summary.rows
    assert rows[0]["cached_prompt_tokens"] == 0  # the first prompt: nothing seen before
    assert all(r["cached_prompt_tokens"] > 0 for r in rows[1:])  # the instructions' prefix, seen before
    assert sum(r["cached_prompt_tokens"] for r in rows) == stats["cached_tokens"]
    assert summary.cost["cached_prompt_tokens"] == round(stats["cached_tokens"] / 3, 3)
    report = summarize_rows(rows)
    assert report["cost"]["cached_prompt_tokens"] == round(stats["cached_tokens"] / 3, 4)
    assert "| cached prompt tokens (provider's prefix cache) |" in render_markdown(report)


def test_an_openai_compatible_lm_chooses_its_route_once_not_on_every_call(server):
    """hqa's LM for an OpenAI-compatible server runs on one engine bound to the server
    (hqa.lm.openai_compatible.OpenAICompatibleEngine): a call does not select a backend, plan the request offline or
    build a router to price it, as a provider-string ``dspy.LM`` does on every call; the replies and their usage still
    reach the caller (the declared wire is pinned against a real llama_cpp.server in test_scaleout)."""
    from unittest import mock

    import dspy
    import dspy.clients.capabilities as capabilities
    import dspy.clients.execution as execution
    from dspy.clients.engines.lm15_engine import LM15Engine

    from hqa.config import load_settings
    from hqa.lm.models import build_lm

    lm = build_lm(load_settings(Path("/nonexistent-hqa.toml"), environ={}, lm_provider="openai_compatible",
                                lm_api_base=server.api_base, lm_model="standin", lm_cache=False, lm_num_retries=0))
    with mock.patch.object(execution, "select_backend", mock.Mock(wraps=execution.select_backend)) as select, \
            mock.patch.object(capabilities, "resolve", mock.Mock(wraps=capabilities.resolve)) as resolve, \
            mock.patch.object(LM15Engine, "plan", autospec=True, side_effect=LM15Engine.plan) as plan, \
            dspy.context(track_usage=True):
        replies = [lm(messages=[{"role": "user", "content": f"Say {i}."}]) for i in range(3)]
    assert all(replies) and (select.call_count, resolve.call_count, plan.call_count) == (0, 0, 0)
    stats = httpx.get(server.api_base.replace("/v1", "/admin/stats")).json()
    assert stats["calls"] == 3 and stats["completion_tokens"] > 0
    assert lm.history[-1]["usage"]["prompt_tokens"] > 0


def test_lm_call_budget_stops_evaluate_with_the_rows_kept_and_a_rerun_resumes(server, tmp_path):
    import dspy

    from hqa.jobs.evaluate import BudgetReached, evaluate
    from hqa.schemas.run_folder import read_rows
    from hqa.programs.closedbook import ClosedBook

    examples = [dspy.Example(id=str(i), question=f"Question {i}?", answers=["x"], answer_ids=[]).with_inputs(
        "question") for i in range(5)]
    out = tmp_path / "run" / "predictions.jsonl"
    lm = dspy.LM("openai/standin", api_base=server.api_base, api_key="x", cache=False, num_retries=0)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        with pytest.raises(BudgetReached, match="LM-call budget of 2 reached after 2 of 5 questions"):
            evaluate(ClosedBook(), examples, out=out, max_lm_calls=2)
        assert [r["id"] for r in read_rows(out)] == ["0", "1"]
        calls = httpx.get(server.api_base.replace("/v1", "/admin/stats")).json()["calls"]
        assert calls == 2  # no question is started once the budget is reached: the queued three were not asked
        summary = evaluate(ClosedBook(), examples, out=out)  # the rerun asks only the three left
    assert summary.n == 5 and httpx.get(server.api_base.replace("/v1", "/admin/stats")).json()["calls"] == calls + 3


def test_cli_evaluate_max_lm_calls_is_one_line_and_resumable(server, tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env.update(HQA_LM__PROVIDER="openai_compatible", HQA_LM__API_BASE=server.api_base, HQA_LM__MODEL="standin",
               HQA_LM__CACHE="false", HQA_PATHS__ARTIFACTS=str(tmp_path / "artifacts"))
    cmd = [sys.executable, "-m", "hqa.cli", "evaluate", "--program", "closedbook", "--dataset", "compmix/test",
           "--limit", "4", "--out", str(tmp_path / "run")]
    proc = subprocess.run(cmd + ["--max-lm-calls", "1"], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=600)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("hqa:")]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    # what the dry run does, then its estimate (the budget ran out inside it), then the stop: one line each
    assert len(lines) == 3 and lines[0].startswith("hqa: estimating closedbook: asking the first 2 of 4"), lines
    assert "dry run stopped by the budget after 1 of 2 questions" in lines[1], lines
    assert lines[2].startswith("hqa: error:") and "LM-call budget of 1 reached after 1 of 4 questions" in lines[2]
    assert len((tmp_path / "run" / "predictions.jsonl").read_text().splitlines()) == 1
    assert "1 questions, 0 errors" in proc.stdout  # the report over the row answered, printed before the stop
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len((tmp_path / "run" / "predictions.jsonl").read_text().splitlines()) == 4

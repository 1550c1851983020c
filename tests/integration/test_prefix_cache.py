"""The share of prompt tokens a provider's prefix cache can serve with a program's step layout (hqa.lm.prefix_cache,
issue 38): OpenAI's rule (1,024 tokens, then 128-token steps) applied to the prompts a run recorded, by hand and
against the loopback LM stand-in's own cached-token accounting over a scripted HumanIQ run."""

from __future__ import annotations

import re

import httpx
import pytest


_WORD = re.compile(r"\w+|[^\w\s]")  # the stand-in's token (standins/openai_lm.py)


@pytest.fixture()
def standin(monkeypatch):
    """The stand-in and the recorder under one rule scaled down to the uncompiled agent's prompts (about 200-900
    of the stand-in's tokens): a prefix of at least 256 tokens, in 32-token steps."""
    from hqa.lm import prefix_cache
    from standins.openai_lm import Behaviour, PrefixCache, start

    monkeypatch.setattr(prefix_cache, "MINIMUM", 256)
    monkeypatch.setattr(prefix_cache, "STEP", 32)
    running = start(Behaviour(latency=0.0), PrefixCache(256, 32))
    yield running
    running.stop()


def test_scripted_humaniq_run_report_matches_the_providers_cached_tokens(standin, pack_toolbox, monkeypatch):
    """A scripted HumanIQ run (five ReAct steps a question, one question at a time) against the stand-in, whose
    ``cached_tokens`` follow OpenAI's rule (scaled down) over its own tokens: counted with the same tokens, the
    report's servable prefix equals what the provider reported, split into the trajectory resent within a question
    and the instructions/demos prefix shared across questions; the report's cost section shows it per program."""
    import dspy

    from hqa.lm import prefix_cache
    from hqa.jobs.evaluate import evaluate
    from hqa.programs import build_program
    from hqa.reports.summary import render_markdown, summarize_rows

    monkeypatch.setattr(prefix_cache, "_TOKENIZE", [_WORD.findall])
    examples = [dspy.Example(id=str(i), question=f"What is the capital of Gabon number {i}?", answers=["Libreville"],
                             answer_ids=[]).with_inputs("question") for i in range(3)]
    lm = dspy.LM("openai/standin", api_base=standin.api_base, api_key="x", cache=False, num_retries=0)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        summary = evaluate(build_program("humaniq", pack_toolbox), examples, threads=1)
    stats = httpx.get(standin.api_base.replace("/v1", "/admin/stats")).json()
    rows = summary.rows
    assert all(len(r["lm_prompts"]) == r["lm_calls"] for r in rows) and not any(r["error"] for r in rows)
    report = summarize_rows(rows)
    got = report["prefix_cache"]["humaniq"]
    assert got["lm_requests"] == stats["calls"] and got["prompt_tokens"] == stats["prompt_tokens"]
    assert got["servable"] == stats["cached_tokens"] > 0
    assert got["within_question"] > 0 and got["across_questions"] > 0  # the trajectory, and the instructions
    assert got["measured_share"] == round(stats["cached_tokens"] / stats["prompt_tokens"], 4) == got["share"]
    md = render_markdown(report)
    line = next(x for x in md.splitlines() if x.startswith("| humaniq |"))
    assert f"| {got['share']} | {got['share_within_question']} | {got['share_across_questions']} |" in line
    assert "1,024 tokens" in md and "prompt-caching" in md

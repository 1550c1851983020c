"""Prices, the estimate line and the optimizers' LM-call bounds (issue 38), without a run (runs under a budget
are in tests/integration/test_budget.py)."""

from __future__ import annotations

import pytest


def test_price_table_prices_known_models_with_a_source_and_the_local_model_at_zero():
    from hqa.jobs.budget import Price, load_prices, price_for
    from hqa.config import LMConfig

    table = load_prices()
    assert table and all(entry.get("source") for entry in table.values())
    mini = price_for(LMConfig(provider="openai", model="gpt-4o-mini"))
    assert (mini.prompt, mini.cached_prompt, mini.completion) == (0.15, 0.075, 0.60)
    prefixed = price_for(LMConfig(provider="openai_compatible", model="openai/gpt-4o-mini", api_base="http://h/v1"))
    assert (prefixed.prompt, prefixed.completion) == (mini.prompt, mini.completion)
    assert price_for(LMConfig(provider="openai", model="no-such-model")) is None
    assert price_for(LMConfig()).dollars(1e6, 0, 1e6) == 0.0  # the embedded model
    # 1M prompt tokens of which 400k cached, 100k completion tokens
    assert Price("m", 1.0, 0.5, 4.0).dollars(1_000_000, 400_000, 100_000) == pytest.approx(0.6 + 0.2 + 0.4)


def test_budget_refuses_max_cost_for_an_unpriced_model():
    from hqa.jobs.budget import Budget
    from hqa.errors import ConfigError

    with pytest.raises(ConfigError, match="not in hqa/data/prices.json"):
        Budget(max_cost=1.0, price=None)


def test_estimate_line_names_its_source_and_scales_time_by_threads():
    from hqa.jobs.budget import Price, estimate_line

    prof = {"lm_calls": 5.0, "prompt_tokens": 2000.0, "cached_prompt_tokens": 1000.0, "completion_tokens": 100.0,
            "seconds": 60.0, "n": 2}
    line = estimate_line("humaniq", prof, 100, 4, "dry run of 2 questions", Price("gpt-x", 1.0, 0.5, 4.0))
    assert line.startswith("hqa: estimate for humaniq (dry run of 2 questions): 5.0 LM calls, 2,000 prompt (1,000 "
                           "cached) / 100 completion tokens per question")
    # 100 questions × (1000 × $1 + 1000 × $0.5 + 100 × $4) / 1M = $0.19; 100 × 60 s / 4 threads = 25 min
    assert "~500 LM calls, ~$0.19 at gpt-x prices, ~25.0 min at --threads 4" in line
    assert "unavailable" in estimate_line("p", None, 3, 1, "dry run of 2 questions")


def test_optimizer_calls_follow_dspys_own_budgets():
    """MIPROv2's trials and GEPA's auto budget are DSPy's own formulas (checked against DSPy's functions, so an
    upgrade that changes them fails here), with minibatches once the validation set passes 50 questions."""
    import dspy

    from hqa.jobs.budget import optimizer_calls

    class P:  # a program with k predictors, as MIPROv2 counts them
        def __init__(self, k):
            self.k = k

        def predictors(self):
            return [None] * self.k

    for k in (1, 3):
        trials = dspy.MIPROv2._set_num_trials_from_num_candidates(None, P(k), False, 6)
        mipro = optimizer_calls("mipro", 40, 20, predictors=k)
        assert mipro.parallel == 20 * (trials + 1) and mipro.serial == 4 * 40
        assert mipro.proposals == 10 + 3 * k + k + 1
        for v in (20, 300):
            assert optimizer_calls("gepa", 40, v, predictors=k).parallel == dspy.GEPA.auto_budget(
                None, num_preds=k, num_candidates=6, valset_size=v)
    # 200 dev questions: a validation set of 100, minibatches of 35 per trial, all 100 at the start, every 5 trials
    # and at the end (10 trials: 1 + 2 + 0 full evaluations)
    assert optimizer_calls("mipro", 40, 200).parallel == 35 * 10 + 100 * 3
    assert optimizer_calls("gepa", 40, 20, gepa_budget=12).parallel == 12
    assert optimizer_calls("mipro", 40, 20, max_bootstrapped_demos=0, max_labeled_demos=0).serial == 4 * 40
    assert optimizer_calls("mipro", 40, 20, max_bootstrapped_demos=0).serial == 0  # labeled demos only


@pytest.mark.parametrize("optimizer", ["bootstrap-rs", "mipro", "gepa"])
def test_search_optimizer_estimates_bound_the_lm_calls_they_make(optimizer, monkeypatch):
    """Compiled for real (test_optimizers.py's tiny split and LM), each search optimizer makes at most the LM calls
    its estimate names (one LM call per closed-book question) and more than a third of them."""
    import dspy

    from hqa.jobs.budget import optimizer_calls
    from hqa.optimize.compile import CompileOptions, compile_program
    from hqa.lm.calls import LMRequestCounter
    from lmkit import lm_for, split

    train, dev = split()
    opts = CompileOptions(program="closedbook", optimizer=optimizer, train="compmix/dev", dev="humaniq-compmix",
                          train_limit=6, dev_limit=3, metric="em", num_candidates=1,
                          budget=12 if optimizer == "gepa" else None)
    counter = LMRequestCounter()
    bootstraps = []  # each BootstrapFewShot run (≤ one train pass each, the bound's serial part)
    real = dspy.BootstrapFewShot.compile
    monkeypatch.setattr(dspy.BootstrapFewShot, "compile", lambda self, *a, **kw: bootstraps.append(1) or real(
        self, *a, **kw))
    with dspy.context(lm=lm_for(train, dev), adapter=dspy.ChatAdapter()):
        with dspy.context(callbacks=[counter]):
            compile_program(opts, train, dev)
    plan = optimizer_calls(optimizer, len(train), len(dev), num_candidates=1, gepa_budget=opts.budget)
    bound = plan.serial + plan.parallel + plan.proposals
    assert bound / 3 < counter.n <= bound, (counter.n, plan)
    assert len(bootstraps) * len(train) == plan.serial

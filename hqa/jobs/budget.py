"""What a run will cost before it runs, and a budget that stops it (issue 38; docs/compiling.md).

One :class:`Budget` for every command that spends LM calls, charged with each finished question's row; dollars come
from ``hqa/data/prices.json`` (each price with its source), the embedded local model costs nothing.
:func:`estimate_line` turns measured rows into the one line printed before the work starts.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Any, Iterable

from hqa.errors import ConfigError, HQAError


class BudgetReached(HQAError):
    """A run stopped at its budget (``--max-lm-calls`` / ``--max-cost``); its rows so far are written.  ``summary``:
    the evaluation's summary over those rows, when an evaluation stopped (:func:`hqa.jobs.evaluate.evaluate`)."""

    summary: Any = None
    run: Any = None  # the stopped evaluation's hqa.jobs.evaluate.EvaluateRun (its report written, its run FINISHED)


class BudgetStop(BaseException):
    """Raised in an LM request made past the budget (:meth:`Budget.guard`, :meth:`Budget.question_guard`): a
    ``BaseException``, because DSPy swallows an ``Exception`` raised in a callback and optimizers swallow a failing
    example's; the job turns it back into :class:`BudgetReached`."""


@dataclass(frozen=True)
class Price:
    """US dollars per 1M tokens of one model."""

    model: str
    prompt: float
    cached_prompt: float
    completion: float
    source: str = ""

    def dollars(self, prompt: float, cached: float, completion: float) -> float:
        """The cost of ``prompt`` prompt tokens (``cached`` of them served from the prefix cache) and ``completion``
        completion tokens."""
        cached = min(cached, prompt)
        return ((prompt - cached) * self.prompt + cached * self.cached_prompt + completion * self.completion) / 1e6


def load_prices() -> dict[str, dict]:
    """The price table ``hqa/data/prices.json``: model name → prompt / cached_prompt / completion $ per 1M tokens."""
    text = resources.files("hqa.data").joinpath("prices.json").read_text(encoding="utf-8")
    return json.loads(text)["models"]


def price_for(lm: Any) -> Price | None:
    """The price of the LM ``lm`` (hqa.config.LMConfig) answers with: 0 for the embedded local model; the settings'
    ``lm.price_in`` / ``lm.price_out`` (per million prompt / completion tokens; a self-hosted server's 0) when set;
    else the table's entry for a known OpenAI(-compatible) model name (a ``provider/`` prefix ignored); else None."""
    if lm.provider == "local":
        return Price(model="embedded local model", prompt=0.0, cached_prompt=0.0, completion=0.0,
                     source="runs on this machine")
    name = str(lm.model or "")
    price_in, price_out = getattr(lm, "price_in", None), getattr(lm, "price_out", None)
    if price_in is not None or price_out is not None:
        if price_in is None or price_out is None:
            raise ConfigError("lm.price_in and lm.price_out go together: set both (US dollars per million prompt / "
                              "completion tokens; 0 for a self-hosted server)")
        return Price(model=name, prompt=float(price_in), cached_prompt=float(price_in), completion=float(price_out),
                     source="lm.price_in / lm.price_out")
    table = load_prices()
    entry = table.get(name) or table.get(name.split("/", 1)[-1])
    if entry is None:
        return None
    return Price(model=name, prompt=float(entry["prompt"]), cached_prompt=float(entry["cached_prompt"]),
                 completion=float(entry["completion"]), source=str(entry.get("source", "")))


class Budget:
    """The LM calls and dollars a run may spend, charged one finished question (a predictions row) at a time;
    thread-safe.  One instance is shared by every part of a run (a dry run, the rest, each arm of a compare), so a
    budget is for the whole command."""

    def __init__(self, max_lm_calls: int | None = None, max_cost: float | None = None, price: Price | None = None):
        if max_lm_calls is not None and max_lm_calls < 1:
            raise ConfigError(f"--max-lm-calls must be at least 1, got {max_lm_calls}")
        if max_cost is not None and not (max_cost > 0):
            raise ConfigError(f"--max-cost must be a positive number of dollars, got {max_cost}")
        if max_cost is not None and price is None:
            raise ConfigError("--max-cost needs the LM's price: its model is not in hqa/data/prices.json; set "
                              "lm.price_in and lm.price_out (US dollars per million tokens, 0 for a self-hosted "
                              "server) or drop --max-cost")
        self.max_lm_calls, self.max_cost, self.price = max_lm_calls, max_cost, price
        self.lm_calls = 0
        self.dollars = 0.0
        self._lock = threading.Lock()

    @classmethod
    def from_args(cls, args: Any, lm: Any) -> "Budget | None":
        """The budget of a command's ``--max-lm-calls`` / ``--max-cost`` (None when it has neither)."""
        calls, cost = getattr(args, "max_lm_calls", None), getattr(args, "max_cost", None)
        if calls is None and cost is None:
            return None
        return cls(max_lm_calls=calls, max_cost=cost, price=price_for(lm) if cost is not None else None)

    def charge(self, row: dict, lm_calls: int | None = None, price: Price | None = None) -> None:
        """Add one finished question's LM calls and (with a price) dollars; ``row`` holds ``prompt_tokens``,
        ``cached_prompt_tokens`` and ``completion_tokens`` (a predictions row, or one LM reply's usage).  ``price``:
        the price of the LM that answered it, when not the budget's own (a study's cells each have their LM)."""
        price = price or self.price
        with self._lock:
            self.lm_calls += int(row.get("lm_calls") or 0) if lm_calls is None else lm_calls
            if price is not None:
                self.dollars += price.dollars(float(row.get("prompt_tokens") or 0),
                                                   float(row.get("cached_prompt_tokens") or 0),
                                                   float(row.get("completion_tokens") or 0))

    @contextlib.contextmanager
    def guard(self, what: str, after: str):
        """Charge every LM request made inside (an optimizer's calls, which hqa does not see as rows) and refuse the
        next one once the budget is reached: :class:`BudgetReached` ``"<limit> while <what> (N LM calls); <after>"``.

        A request is charged when it starts and refunded when it ends as a reply from DSPy's LM cache (no usage
        reached DSPy's usage tracker for it: the provider was not asked), so a compile run again after a stop, whose
        earlier replies the cache on disk holds, spends its budget on new requests only.  A request is refused from a
        DSPy callback's ``on_lm_start`` by raising a ``BaseException`` (DSPy swallows an ``Exception`` raised in a
        callback, and optimizers swallow a failing example's ``Exception``), so the optimizer stops instead of
        carrying on with failed examples; it is turned back into BudgetReached here."""
        import dspy

        calls = threading.local()  # per thread, its requests in progress: billed yet? (usage comes before the end)
        lm_guard, charging_tracker, _ = _guard_classes()
        with dspy.context(callbacks=[*(dspy.settings.get("callbacks") or []), lm_guard(self, calls)],
                          usage_tracker=charging_tracker(self, calls)):
            try:
                yield self
            except BudgetStop:
                pass
            else:
                return
        raise BudgetReached(f"{self.reached()} while {what} ({self.lm_calls} LM calls); {after}")

    def question_guard(self):
        """A recorder for one evaluated question (:func:`hqa.lm.calls.recording`) that charges each LM request as
        it is sent and refuses the next one once the budget is reached (:class:`BudgetStop`), so an LM-call budget
        holds exactly: every request is counted when an engine sends it (hqa's engines say so,
        :func:`hqa.lm.calls.note_attempt`; a reply DSPy's cache serves costs nothing), or when it starts for an LM
        on another engine.  Dollars are charged from each finished question's usage (:meth:`charge`)."""
        return request_guard(self)

    def charge_request(self) -> None:
        """Count one LM request about to be sent, or refuse it (:class:`BudgetStop`) when the budget is reached."""
        if self.reached():
            raise BudgetStop()
        with self._lock:
            self.lm_calls += 1

    def reached(self) -> str | None:
        """Which limit is reached (a phrase for the stop message), or None."""
        with self._lock:
            if self.max_lm_calls is not None and self.lm_calls >= self.max_lm_calls:
                return f"LM-call budget of {self.max_lm_calls} reached"
            if self.max_cost is not None and self.dollars >= self.max_cost:
                return (f"cost budget of ${self.max_cost:g} reached (${self.dollars:.4f} spent at "
                        f"{self.price.model} prices)")
            return None


def request_guard(charger: Any):
    """:meth:`Budget.question_guard` over anything with a ``charge_request()`` that counts one LM request about to be
    sent or raises :class:`BudgetStop` (a Ray worker's share of the driver's budget, :mod:`hqa.jobs.ray_engine`)."""
    return _guard_classes()[2](charger)


@functools.lru_cache(maxsize=1)
def _guard_classes():
    from dspy.utils.callback import BaseCallback
    from dspy.utils.usage_tracker import UsageTracker

    class LMGuard(BaseCallback):
        """Counts each LM request and refuses it once the budget is reached; refunds a request DSPy's cache served."""

        def __init__(self, budget: Budget, calls: threading.local):
            self.budget, self.calls = budget, calls

        def on_lm_start(self, call_id, instance, inputs):
            if self.budget.reached():
                raise BudgetStop()
            self.budget.charge({}, lm_calls=1)
            self.calls.__dict__.setdefault("open", []).append(False)

        def on_lm_end(self, call_id, outputs, exception=None):
            open_calls = getattr(self.calls, "open", None)
            if open_calls and not open_calls.pop() and exception is None:  # no usage recorded: a cache hit
                self.budget.charge({}, lm_calls=-1)

    class ChargingTracker(UsageTracker):
        """DSPy's usage tracker that also charges each reply's tokens to the budget.  DSPy calls it for every reply
        that did not come from its cache (hqa.jobs.budget.Budget.guard), with the provider's usage (empty when the
        provider reports none)."""

        def __init__(self, budget: Budget, calls: threading.local):
            super().__init__()
            self.budget, self.calls = budget, calls

        def add_usage(self, lm, usage_entry):
            super().add_usage(lm, usage_entry)
            open_calls = getattr(self.calls, "open", None)
            if open_calls:
                open_calls[-1] = True
            usage = self._flatten_usage_entry(usage_entry or {})
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            self.budget.charge({"prompt_tokens": usage.get("prompt_tokens"), "cached_prompt_tokens": cached,
                                "completion_tokens": usage.get("completion_tokens")}, lm_calls=0)

    class QuestionGuard(BaseCallback):
        """:meth:`Budget.question_guard`: charges each LM request of one question as it is sent."""

        def __init__(self, budget: Budget):
            self.budget = budget

        def on_lm_start(self, call_id, instance, inputs):
            if not getattr(getattr(instance, "engine", None), "counts_attempts", False):
                self.budget.charge_request()  # an engine that does not say when it sends: charged at the start

        def on_attempt(self):
            self.budget.charge_request()

    return LMGuard, ChargingTracker, QuestionGuard


def profile(rows: Iterable[dict]) -> dict[str, float] | None:
    """Per-question means of measured rows (LM calls, prompt / cached prompt / completion tokens, seconds), from
    rows that did not fail; None when there are none."""
    good = [r for r in rows if not r.get("error")]
    if not good:
        return None
    keys = ("lm_calls", "prompt_tokens", "cached_prompt_tokens", "completion_tokens", "seconds")
    out = {k: sum(float(r.get(k) or 0) for r in good) / len(good) for k in keys}
    out["n"] = len(good)
    return out


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def estimate_line(label: str, prof: dict[str, float] | None, left: int, threads: int, source: str,
                  price: Price | None = None, serial: int = 0, what: str = "", note: str = "",
                  extra_calls: int = 0) -> str:
    """The one estimate line: per question LM calls and tokens, then for the ``left`` questions still to answer the
    LM calls, dollars (with a price) and wall time at ``threads`` at once (assuming the LM serves that many requests
    as fast as one).  ``serial``: more questions run one at a time; ``what``: what is counted; ``note`` ends the
    line; ``extra_calls``: single LM calls (an optimizer's proposals) at a question's mean per LM call.  ``prof``
    None: the measured questions all failed, and the line says so."""
    what = what or f"{left} questions left"
    if prof is None:
        return f"hqa: estimate for {label} unavailable ({source}: every question failed); {what}"
    per = (f"{prof['lm_calls']:.1f} LM calls, {prof['prompt_tokens']:,.0f} prompt ({prof['cached_prompt_tokens']:,.0f} "
           f"cached) / {prof['completion_tokens']:,.0f} completion tokens per question")
    n = left + serial
    per_call = 1 / prof["lm_calls"] if prof["lm_calls"] else 0.0  # one extra call, as a share of a question
    n_priced = n + extra_calls * per_call
    total = f"{what}: ~{prof['lm_calls'] * n + extra_calls:,.0f} LM calls"
    if price is not None:
        dollars = price.dollars(prof["prompt_tokens"], prof["cached_prompt_tokens"], prof["completion_tokens"])
        dollars *= n_priced
        total += f", ~${dollars:.2f}" if dollars >= 0.01 or dollars == 0 else f", ~${dollars:.1g}"
        total += f" at {price.model} prices"
    wall = prof["seconds"] * (serial + left / max(1, threads) + extra_calls * per_call)
    total += f", ~{_duration(wall)} at --threads {threads}"
    return f"hqa: estimate for {label} ({source}): {per}; {total}" + (f"; {note}" if note else "")


@dataclass(frozen=True)
class OptimizerCalls:
    """What one compile's optimizer spends (:func:`optimizer_calls`): program questions asked one at a time
    (bootstrapping), at ``--threads`` (candidates evaluated), and single LM calls that are not questions (proposals,
    GEPA's reflections); upper bounds where the optimizer may stop early.  ``formula`` says how it was counted."""

    serial: int = 0
    parallel: int = 0
    proposals: int = 0
    formula: str = ""


def _trials(predictors: int, zero_shot: bool, n: int) -> int:
    """MIPROv2's number of trials for ``n`` candidates (``_set_num_trials_from_num_candidates``; GEPA's
    ``auto_budget`` uses the same with two variables per predictor): max(2·M·log2 n, 1.5·n), M = predictors (×2
    with few-shot demos)."""
    import math

    m = predictors * (1 if zero_shot else 2)
    return int(max(2 * m * math.log2(n), 1.5 * n))


#: DSPy's auto="light" settings: MIPROv2 (``mipro_optimizer_v2.AUTO_RUN_SETTINGS``: 6 candidates, a validation set
#: of at most 100, minibatches of 35 with a full evaluation every 5 trials when it is larger than 50) and GEPA
#: (``gepa.AUTO_RUN_SETTINGS``: 6 candidates; reflection minibatches of 3)
LIGHT_N, MIPRO_VAL, MIPRO_MINIBATCH, MIPRO_MIN_MINIBATCH, FULL_EVAL_STEPS, GEPA_MINIBATCH = 6, 100, 35, 50, 5, 3


def optimizer_calls(optimizer: str, train_n: int, dev_n: int, predictors: int = 1, num_candidates: int = 4,
                    max_bootstrapped_demos: int = 2, max_labeled_demos: int = 2,
                    gepa_budget: int | None = None) -> OptimizerCalls:
    """The calls of ``hqa compile --optimizer OPTIMIZER`` with ``train_n`` train and ``dev_n`` dev questions and a
    program of ``predictors`` predictors, from each optimizer's call structure in DSPy 3.4's source: the formulas
    and their sources are the table in docs/compiling.md ("Budgets and estimates")."""
    if optimizer in ("bootstrap", "human+bootstrap"):
        return OptimizerCalls(serial=train_n, formula=f"≤ {train_n} train questions")
    if optimizer == "bootstrap-rs":
        n = num_candidates
        return OptimizerCalls(serial=(n + 1) * train_n, parallel=(n + 3) * train_n,
                              formula=f"≤ ({n}+1)×{train_n} bootstrap + ({n}+3)×{train_n} evaluation questions")
    if optimizer == "mipro":
        zero_shot = max_bootstrapped_demos == 0 and max_labeled_demos == 0
        val = min(dev_n, MIPRO_VAL) if dev_n else max(1, int(train_n * 0.8))  # no dev: DSPy keeps 80% of train
        trials = _trials(predictors, zero_shot, LIGHT_N)
        if val > MIPRO_MIN_MINIBATCH:
            fulls = 1 + trials // FULL_EVAL_STEPS + (1 if trials % FULL_EVAL_STEPS else 0)
            parallel, how = MIPRO_MINIBATCH * trials + val * fulls, f"{MIPRO_MINIBATCH}×{trials} + {val}×{fulls}"
        else:
            parallel, how = val * (trials + 1), f"{val}×({trials}+1)"
        boot_train = train_n - val if not dev_n else train_n
        # create_n_fewshot_demo_sets takes 3 of the N sets for zero-shot, labeled-only and unshuffled: N - 3
        # shuffled bootstraps + the unshuffled one; zero-shot still bootstraps (3 demos, for the proposer), while
        # no bootstrapped demos beside labeled ones asks nothing
        bootstraps = LIGHT_N - 2 if (zero_shot or max_bootstrapped_demos > 0) else 0
        serial = bootstraps * boot_train
        instructions = LIGHT_N if zero_shot else LIGHT_N // 2
        proposals = 10 + instructions * predictors + predictors + 1
        return OptimizerCalls(serial=serial, parallel=parallel, proposals=proposals,
                              formula=f"≤ {bootstraps}×{boot_train} bootstrap + {how} trial questions + {proposals} "
                                      "proposal calls")
    if optimizer == "gepa":
        val = dev_n or train_n
        if gepa_budget:
            budget = gepa_budget
        else:
            trials = _trials(predictors, False, LIGHT_N)
            fulls = (trials + 1) // FULL_EVAL_STEPS + 1 + (1 if trials < FULL_EVAL_STEPS else 0)
            budget = val + LIGHT_N * 5 + trials * MIPRO_MINIBATCH + fulls * val
        return OptimizerCalls(parallel=budget, proposals=budget // GEPA_MINIBATCH,
                              formula=f"~{budget} metric-call questions + ≤ {budget // GEPA_MINIBATCH} reflection "
                                      "calls")
    return OptimizerCalls()

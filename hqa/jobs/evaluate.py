"""Run a program over examples: metrics, cost and traces per question, appended to a JSONL file (resumable).

Each finished question is written as one line to the run folder's rows file (:mod:`hqa.schemas.run_folder`) as soon as it is done, so an interrupted run
loses at most the questions in flight and a rerun skips every id already written.  LM replies are cached by DSPy,
so even re-running a question costs no LM call.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from hqa.jobs.budget import Budget, BudgetReached, profile
from hqa.errors import DataError, HQAError
from hqa.scoring.metrics import score_all
from hqa.schemas.run_folder import check_run_tag, lock_folder, resume_rows

log = logging.getLogger(__name__)


@dataclass
class EvalSummary:
    n: int
    metrics: dict[str, float]
    cost: dict[str, float]
    errors: int
    path: Path | None = None
    rows: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "metrics": self.metrics, "cost": self.cost, "errors": self.errors,
                "path": str(self.path) if self.path else None}


def _usage_tokens(pred) -> tuple[int, int]:
    try:
        usage = pred.get_lm_usage() or {}
    except Exception:  # noqa: BLE001 - usage tracking is best effort
        return 0, 0
    prompt = sum(int(u.get("prompt_tokens") or 0) for u in usage.values() if isinstance(u, dict))
    completion = sum(int(u.get("completion_tokens") or 0) for u in usage.values() if isinstance(u, dict))
    return prompt, completion


def _cached_prompt_tokens(pred) -> int:
    """Prompt tokens the provider served from its prefix cache (OpenAI's ``usage.prompt_tokens_details.
    cached_tokens``; 0 when the LM reports none)."""
    try:
        usage = pred.get_lm_usage() or {}
    except Exception:  # noqa: BLE001 - usage tracking is best effort
        return 0
    return sum(int(((u.get("prompt_tokens_details") or {}) if isinstance(u, dict) else {}).get("cached_tokens") or 0)
               for u in usage.values())


def run_one(program, example) -> dict[str, Any]:
    """Answer one example; never raises (an exception becomes the row's ``error``)."""
    import dspy

    from hqa.lm.prefix_cache import PromptRecorder
    from hqa.lm.calls import DemoRecorder, LMRequestCounter
    from hqa.answering.presentation import prediction_fields

    counter = LMRequestCounter()  # every LM request of this question, retries included
    demos = DemoRecorder(program)  # the demos each predictor's prompts held for this question
    prompts = PromptRecorder()  # each LM request's prompt length and prefix digests (hqa.lm.prefix_cache)
    start = time.monotonic()
    row: dict[str, Any] = {"id": row_id(example), "question": example.question,
                           "gold": list(example.get("answers") or []), "gold_ids": list(example.get("answer_ids") or []),
                           "dataset": example.get("dataset"), "gold_entities": list(example.get("gold_entities") or []),
                           "decomposition": example.get("decomposition")}
    try:
        with dspy.context(track_usage=True, callbacks=[*counter.installed(), demos, prompts]):
            pred = program(question=example.question)
        trace = getattr(pred, "trace", None) or {}
        prompt_t, completion_t = _usage_tokens(pred)
        # the one answer shape (hqa.answering.presentation.prediction_fields): an abstention's answer is None (never right)
        row.update(**prediction_fields(pred), trace=trace, error=None, prompt_tokens=prompt_t,
                   completion_tokens=completion_t, tool_calls=len(trace.get("tool_calls", []) or []),
                   demos=demos.used, cached_prompt_tokens=_cached_prompt_tokens(pred))
        down = [q.get("error") for q in trace.get("sparql", []) or [] if isinstance(q, dict) and q.get("unavailable")]
        linker = (trace.get("source_errors") or {}).get("linker")  # an outage the GuardedLinker observed
        if down:  # answered without the KG because the endpoint was down: asked again on resume
            row["degraded"] = f"SPARQL endpoint unavailable: {down[0]}"[:500]
        elif linker:  # likewise answered without entity links
            row["degraded"] = str(linker)[:500]
    except Exception as exc:  # noqa: BLE001 - one failing question must not lose the run
        row.update(answer="", trace={}, error=f"{type(exc).__name__}: {exc}"[:500], prompt_tokens=0,
                   completion_tokens=0, tool_calls=0, cached_prompt_tokens=0)
    row["lm_calls"] = counter.n
    row["lm_prompts"] = prompts.calls
    row["seconds"] = round(time.monotonic() - start, 3)
    row["scores"] = score_all(row["answer"] or "", row["gold"], row["gold_ids"])
    return row


def row_id(example) -> str | None:
    """The id a predictions row keys ``example`` by: its ``id`` as a string (rows hold string ids only)."""
    value = example.get("id")
    return None if value is None else str(value)


def summarize(rows: list[dict]) -> tuple[dict[str, float], dict[str, float]]:
    n = max(len(rows), 1)
    metrics = {k: round(sum(r["scores"].get(k, 0.0) for r in rows) / n, 4) for k in ("em", "f1", "recall", "hits1")}
    cost = {k: round(sum(float(r.get(k) or 0) for r in rows) / n, 3)
            for k in ("lm_calls", "prompt_tokens", "cached_prompt_tokens", "completion_tokens", "tool_calls",
                      "seconds")}
    return metrics, cost


def evaluate(program, examples: Iterable, *, threads: int = 1, out: Path | None = None, resume: bool = True,
             progress: bool = False, on_row: Callable[[dict], None] | None = None,
             tag: dict[str, str] | None = None, max_lm_calls: int | None = None, budget: Budget | None = None,
             estimate: Callable[[dict | None, int, str], None] | None = None, probe: int = 2) -> EvalSummary:
    """:func:`_evaluate` with the output folder locked for the whole run: a second run on it refuses at once."""
    kwargs = dict(threads=threads, out=out, resume=resume, progress=progress, on_row=on_row, tag=tag,
                  max_lm_calls=max_lm_calls, budget=budget, estimate=estimate, probe=probe)
    if out is None:
        return _evaluate(program, examples, **kwargs)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    held = lock_folder(Path(out).parent)
    try:
        return _evaluate(program, examples, **kwargs)
    finally:
        held.close()


def _evaluate(program, examples: Iterable, *, threads: int = 1, out: Path | None = None, resume: bool = True,
              progress: bool = False, on_row: Callable[[dict], None] | None = None,
              tag: dict[str, str] | None = None, max_lm_calls: int | None = None, budget: Budget | None = None,
              estimate: Callable[[dict | None, int, str], None] | None = None, probe: int = 2) -> EvalSummary:
    """Evaluate ``program`` on ``examples`` (dspy.Example with question, answers, answer_ids, id).

    With ``out`` (a .jsonl path), rows are appended as they finish and ids already present are skipped.  ``tag``
    (e.g. program and dataset) is kept beside ``out``; resuming rows another tag wrote is refused (see
    :func:`hqa.schemas.run_folder.check_run_tag`).  ``max_lm_calls``: a budget of LM requests for the questions this call asks; once the
    rows written reach it, the queued questions are dropped (as on Ctrl-C) and :class:`BudgetReached` is raised —
    the rows so far are kept, and a rerun resumes from them.  ``budget`` (:class:`hqa.jobs.budget.Budget`, which
    ``max_lm_calls`` is shorthand for) does the same for LM calls and dollars, and may be shared with other runs.

    ``estimate(profile, left, source)`` is called once before the bulk of the work, with per-question means
    (:func:`hqa.jobs.budget.profile`; None when every dry-run question failed) and the number of questions still to answer: measured on the rows an earlier run
    left in ``out`` when there are any, else on a dry run of the first ``probe`` questions, whose rows are written
    and count toward this run (nothing is asked twice).
    """
    if budget is None and max_lm_calls is not None:
        budget = Budget(max_lm_calls=max_lm_calls)
    examples = list(examples)
    ids = [row_id(ex) for ex in examples]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise DataError(f"duplicate example id {dup!r}: evaluation rows are keyed by id")
    done: dict[Any, dict] = {}
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        before = resume_rows(out) if resume else []
        check_run_tag(out, tag, examples, resume, rows=before)
        if resume:
            # a question whose earlier attempt raised (endpoint down, LM server gone, ...) is asked again
            # likewise a question answered while the SPARQL endpoint was down ("degraded")
            done = {r["id"]: r for r in before if r.get("id") in set(ids)}
            done = {i: r for i, r in done.items() if not r.get("error") and not r.get("degraded")}
        elif out.exists():
            out.unlink()
    todo = [ex for ex in examples if row_id(ex) not in done]
    lock = threading.Lock()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(examples), initial=len(done), desc="evaluate", unit="q")

    new_rows: dict[Any, dict] = {}

    def ask(batch: list, workers: int) -> None:
        """Answer ``batch``, writing each row as it finishes; stop at the budget.

        The budget is charged by the worker as each question finishes, and a worker starts no question once it is
        reached: the questions in flight on other workers finish and their rows are written (they were paid for),
        the queued ones are never asked, and :class:`BudgetReached` is raised after the last row is written."""
        reason = budget.reached() if budget is not None and batch else None
        if reason:  # spent before this run began (a compile before its dev evaluation)
            raise BudgetReached(f"{reason} after {len(new_rows)} of {len(todo)} questions ({budget.lm_calls} LM "
                                "calls); the rows so far are kept" + (f" in {out}" if out is not None else ""))
        stop = threading.Event()

        def attempt(ex) -> dict | None:
            if stop.is_set():
                return None  # not asked: the budget was reached or the run is stopping
            row = run_one(program, ex)
            if budget is not None:
                budget.charge(row)
                if budget.reached():
                    stop.set()
            return row

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = [pool.submit(contextvars.copy_context().run, attempt, ex) for ex in batch]
            try:
                for fut in as_completed(futures):
                    row = fut.result()
                    if row is None:
                        continue
                    with lock:
                        new_rows[row["id"]] = row
                        if out is not None:
                            try:
                                # a lone surrogate (broken emoji from an LM or endpoint) must not lose the run: it is
                                # written as its JSON escape and reads back unchanged
                                with open(out, "a", encoding="utf-8", errors="backslashreplace") as fh:
                                    fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
                                    fh.flush()
                            except OSError as exc:
                                raise HQAError(f"cannot append to {out}: {exc.strerror or exc}; the rows already "
                                               "written are kept and a rerun resumes from them") from None
                        if on_row:
                            on_row(row)
                        if bar:
                            bar.update(1)
            except BaseException:
                # Ctrl-C or a failed write: drop the queued questions instead of running them all before exiting;
                # only those already in flight finish (their rows are not written, a rerun asks them again)
                stop.set()
                for f in futures:
                    f.cancel()
                raise
        reason = budget.reached() if budget is not None else None
        if reason and len(new_rows) < len(todo):
            raise BudgetReached(f"{reason} after {len(new_rows)} of {len(todo)} questions ({budget.lm_calls} LM "
                                "calls); the rows so far are kept" + (f" in {out}" if out is not None else "")
                                + ": rerun to resume")

    try:
        first: list = []
        if estimate is not None and todo:
            earlier = profile(done.values())
            if earlier is not None:
                estimate(earlier, len(todo), f"measured on {earlier['n']} earlier rows in {out}")
            else:
                first = todo[:max(1, probe)]
                ask(first, min(threads, len(first)))
                estimate(profile(new_rows.values()), len(todo) - len(first),
                         f"dry run of {len(first)} questions, kept in this run")
        ask(todo[len(first):], threads)
    finally:
        if bar:
            bar.close()
    rows = [done.get(i) or new_rows[i] for i in ids]
    metrics, cost = summarize(rows)
    return EvalSummary(n=len(rows), metrics=metrics, cost=cost, errors=sum(1 for r in rows if r.get("error")),
                       path=out, rows=rows)


# the per-question scores MLflow's evaluation view lists: hqa.scoring.metrics functions as MLflow scorers, by row-score name
GENAI_SCORERS = {"em": "exact_match", "hits1": "hits_at_1", "recall": "answer_recall", "qald_f1": "qald_f1"}


def genai_scorers() -> list:
    """hqa's metrics (:mod:`hqa.scoring.metrics`: exact match, Hits@1, answer recall, QALD per-question F1) as MLflow GenAI
    scorers reading ``outputs`` (the answer) and ``expectations`` (``answers`` and ``answer_ids``)."""
    from mlflow.genai.scorers import scorer

    from hqa.scoring import metrics as M

    def qald_f1(pred, golds, gold_ids):
        return M.qald_prf(pred, golds, gold_ids)[2]

    functions = {"exact_match": lambda p, g, _i: M.exact_match(p, g), "hits_at_1": M.hits_at_1,
                 "answer_recall": lambda p, g, _i: M.answer_recall(p, g), "qald_f1": qald_f1}

    def make(name: str, fn):
        def score(outputs, expectations) -> float:
            expectations = expectations or {}
            return round(float(fn(str(outputs or ""), list(expectations.get("answers") or []),
                                  list(expectations.get("answer_ids") or []))), 4)

        return scorer(score, name=name)

    return [make(name, functions[fname]) for name, fname in GENAI_SCORERS.items()]


def log_genai_evaluation(rows: list[dict], model_id: str | None = None):
    """Log ``rows`` (an evaluation's predictions rows, answers already computed: no second LM pass) through
    ``mlflow.genai.evaluate`` into the active MLflow run, so MLflow's evaluation view lists every question with its
    answer, gold answers and one assessment per scorer of :func:`genai_scorers`.  A question that failed has an empty
    answer (scored 0) and its error as a tag.  Returns MLflow's EvaluationResult."""
    import mlflow

    data = []
    for row in rows:
        tags = {"hqa.id": str(row["id"])}
        if row.get("dataset"):
            tags["hqa.dataset"] = str(row["dataset"])
        if row.get("error"):
            tags["hqa.error"] = str(row["error"])[:250]
        data.append({"inputs": {"question": row["question"]}, "outputs": row.get("answer") or "",
                     "expectations": {"answers": list(row.get("gold") or []),
                                      "answer_ids": list(row.get("gold_ids") or [])}, "tags": tags})
    # a SQLite store takes one writer at a time: MLflow's 10 parallel workers lost 60 of 100 questions' traces
    # (measured on this project's 2-core machine), one worker lost none; the user's own setting wins
    serial = {name: "1" for name in ("MLFLOW_GENAI_EVAL_MAX_WORKERS", "MLFLOW_GENAI_EVAL_MAX_SCORER_WORKERS")
              if name not in os.environ and mlflow.get_tracking_uri().startswith("sqlite:")}
    os.environ.update(serial)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # MLflow's banner is not hqa's output
            return mlflow.genai.evaluate(data=data, scorers=genai_scorers(), model_id=model_id)
    finally:
        for name in serial:
            os.environ.pop(name, None)

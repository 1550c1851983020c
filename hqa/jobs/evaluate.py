"""Run a program over examples: metrics, cost and traces per question, appended to a JSONL file (resumable).

Each finished question is written as one line to the run folder's rows file (:mod:`hqa.schemas.run_folder`) as soon
as it is done, so an interrupted run loses at most the questions in flight and a rerun skips every id already
written.  LM replies are cached by DSPy, so even re-running a question costs no LM call.
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
from hqa.jobs.heap import settled
from hqa.errors import DataError, HQAError
from hqa.scoring.metrics import score_all
from hqa.schemas.run_folder import check_run_tag, lock_folder, resume_rows
from hqa.schemas.trace import failed_sources

log = logging.getLogger(__name__)


@dataclass
class EvalSummary:
    n: int
    metrics: dict[str, float]
    cost: dict[str, float]
    errors: int
    path: Path | None = None
    rows: list[dict] = field(default_factory=list)


def usage_tokens(pred) -> tuple[int, int, int]:
    """(prompt, completion, cached prompt) tokens of ``pred``'s LM usage; cached: served from the provider's prefix
    cache (OpenAI's ``usage.prompt_tokens_details.cached_tokens``).  Zeros when the LM reports none."""
    try:
        usage = [u for u in (pred.get_lm_usage() or {}).values() if isinstance(u, dict)]
    except Exception:  # noqa: BLE001 - usage tracking is best effort
        return 0, 0, 0
    return (sum(int(u.get("prompt_tokens") or 0) for u in usage),
            sum(int(u.get("completion_tokens") or 0) for u in usage),
            sum(int((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0) for u in usage))


def run_one(program, example) -> dict[str, Any]:
    """Answer one example; never raises (an exception becomes the row's ``error``)."""
    from hqa.lm.prefix_cache import PromptRecorder
    from hqa.lm.calls import DemoRecorder, LMRequestCounter, asking
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
        with asking(program, counter, demos, prompts):
            pred = program(question=example.question)
        trace = getattr(pred, "trace", None) or {}
        prompt_t, completion_t, cached_t = usage_tokens(pred)
        # the one answer shape (hqa.answering.presentation.prediction_fields): an abstention's answer is None (never right)
        row.update(**prediction_fields(pred), trace=trace, error=None, prompt_tokens=prompt_t,
                   completion_tokens=completion_t, tool_calls=len(trace.get("tool_calls", []) or []),
                   demos=demos.used, cached_prompt_tokens=cached_t)
        failed = failed_sources(trace)
        if "kg" in failed:  # answered without the KG because the endpoint was down: asked again on resume
            row["degraded"] = f"SPARQL endpoint unavailable: {failed['kg']}"[:500]
        elif "linker" in failed:  # likewise answered without entity links (an outage the GuardedLinker observed)
            row["degraded"] = failed["linker"][:500]
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
    """Evaluate ``program`` on ``examples`` (dspy.Example with question, answers, answer_ids, id).

    With ``out`` (a .jsonl path, its folder locked for the whole run: a second run on it refuses at once), rows are
    appended as they finish and ids already present are skipped.  ``tag`` (e.g. program and dataset) is kept beside
    ``out``; resuming rows another tag wrote is refused (:func:`hqa.schemas.run_folder.check_run_tag`).
    ``max_lm_calls``: a budget of LM requests for the questions this call asks; once the rows written reach it, the
    queued questions are dropped (as on Ctrl-C) and :class:`BudgetReached` is raised — the rows so far are kept, and
    a rerun resumes from them.  ``budget`` (:class:`hqa.jobs.budget.Budget`, which ``max_lm_calls`` is shorthand
    for) does the same for LM calls and dollars, and may be shared with other runs.

    ``estimate(profile, left, source)`` is called once before the bulk of the work (:func:`_estimate`).
    """
    held = None
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        held = lock_folder(out.parent, out)
    try:
        if budget is None and max_lm_calls is not None:
            budget = Budget(max_lm_calls=max_lm_calls)
        examples = list(examples)
        ids = [row_id(ex) for ex in examples]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise DataError(f"duplicate example id {dup!r}: evaluation rows are keyed by id")
        done = _kept_rows(out, tag, examples, set(ids), resume)
        asking = _Asking(program, [ex for ex in examples if row_id(ex) not in done], out, budget, on_row,
                         _progress_bar(len(examples), len(done)) if progress else None)
        try:
            with settled():  # the collector's policy while questions run (hqa.jobs.heap)
                estimating = estimate is not None and asking.todo
                first = _estimate(asking, done, estimate, probe, threads) if estimating else []
                asking.ask(asking.todo[len(first):], threads)
        finally:
            if asking.bar:
                asking.bar.close()
    finally:
        if held is not None:
            held.close()
    rows = [done.get(i) or asking.rows[i] for i in ids]
    metrics, cost = summarize(rows)
    return EvalSummary(n=len(rows), metrics=metrics, cost=cost, errors=sum(1 for r in rows if r.get("error")),
                       path=out, rows=rows)


def _progress_bar(total: int, done: int):
    from tqdm import tqdm

    return tqdm(total=total, initial=done, desc="evaluate", unit="q")


def _kept_rows(out: Path | None, tag: dict[str, str] | None, examples: list, ids: set, resume: bool) -> dict:
    """The rows of ``out`` a resumed run keeps, by id, after the run tag is checked and written
    (:func:`check_run_tag`); without ``resume`` none, and ``out`` is removed."""
    if out is None:
        return {}
    before = resume_rows(out) if resume else []
    check_run_tag(out, tag, examples, resume, rows=before)
    if not resume:
        if out.exists():
            out.unlink()
        return {}
    # a question whose earlier attempt raised (endpoint down, LM server gone, ...) is asked again, likewise a
    # question answered while the SPARQL endpoint was down ("degraded")
    return {r["id"]: r for r in before if r.get("id") in ids and not r.get("error") and not r.get("degraded")}


def _estimate(asking: "_Asking", done: dict, estimate: Callable, probe: int, threads: int) -> list:
    """Call ``estimate`` with per-question means (:func:`hqa.jobs.budget.profile`; None when every dry-run question
    failed) and the questions still to answer: measured on the earlier rows ``done``, else on a dry run of the first
    ``probe`` questions, whose rows count toward this run (nothing is asked twice).  The questions the dry run asked."""
    earlier = profile(done.values())
    if earlier is not None:
        estimate(earlier, len(asking.todo), f"measured on {earlier['n']} earlier rows in {asking.out}")
        return []
    first = asking.todo[:max(1, probe)]
    asking.ask(first, min(threads, len(first)))
    estimate(profile(asking.rows.values()), len(asking.todo) - len(first),
             f"dry run of {len(first)} questions, kept in this run")
    return first


class _Asking:
    """The questions one evaluation still has to answer (``todo``), and the rows it wrote so far (``rows``)."""

    def __init__(self, program, todo: list, out: Path | None, budget: Budget | None,
                 on_row: Callable[[dict], None] | None, bar: Any):
        self.program, self.todo, self.out, self.budget, self.on_row, self.bar = program, todo, out, budget, on_row, bar
        self.rows: dict[Any, dict] = {}
        self._lock = threading.Lock()

    def ask(self, batch: list, workers: int) -> None:
        """Answer ``batch``, writing each row as it finishes; stop at the budget.

        The budget is charged by the worker as each question finishes, and a worker starts no question once it is
        reached: the questions in flight on other workers finish and their rows are written (they were paid for),
        the queued ones are never asked, and :class:`BudgetReached` is raised after the last row is written."""
        if batch:
            self._check_budget(after=False)  # spent before this run began (a compile before its dev evaluation)
        stop = threading.Event()
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = [pool.submit(contextvars.copy_context().run, self._attempt, ex, stop) for ex in batch]
            try:
                for fut in as_completed(futures):
                    row = fut.result()
                    if row is not None:
                        self._keep(row)
            except BaseException:
                # Ctrl-C or a failed write: drop the queued questions instead of running them all before exiting;
                # only those already in flight finish (their rows are not written, a rerun asks them again)
                stop.set()
                for f in futures:
                    f.cancel()
                raise
        self._check_budget(after=True)

    def _check_budget(self, after: bool) -> None:
        """BudgetReached when the budget is reached (``after`` a batch: only with questions left unasked)."""
        reason = self.budget.reached() if self.budget is not None else None
        if reason and (not after or len(self.rows) < len(self.todo)):
            kept = "the rows so far are kept" + (f" in {self.out}" if self.out is not None else "")
            raise BudgetReached(f"{reason} after {len(self.rows)} of {len(self.todo)} questions "
                                f"({self.budget.lm_calls} LM calls); {kept}" + (": rerun to resume" if after else ""))

    def _attempt(self, ex, stop: threading.Event) -> dict | None:
        if stop.is_set():
            return None  # not asked: the budget was reached or the run is stopping
        row = run_one(self.program, ex)
        if self.budget is not None:
            self.budget.charge(row)
            if self.budget.reached():
                stop.set()
        return row

    def _keep(self, row: dict) -> None:
        with self._lock:
            self.rows[row["id"]] = row
            if self.out is not None:
                try:
                    # a lone surrogate (broken emoji from an LM or endpoint) must not lose the run: it is written as
                    # its JSON escape and reads back unchanged
                    with open(self.out, "a", encoding="utf-8", errors="backslashreplace") as fh:
                        fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
                        fh.flush()
                except OSError as exc:
                    raise HQAError(f"cannot append to {self.out}: {exc.strerror or exc}; the rows already written "
                                   "are kept and a rerun resumes from them") from None
            if self.on_row:
                self.on_row(row)
            if self.bar:
                self.bar.update(1)


# the per-question scores MLflow's evaluation view lists: hqa.scoring.metrics functions as MLflow scorers, by row-score name
GENAI_SCORERS = {"em": "exact_match", "hits1": "hits_at_1", "recall": "answer_recall", "qald_f1": "qald_f1"}


def genai_scorers() -> list:
    """hqa's metrics (:mod:`hqa.scoring.metrics`: exact match, Hits@1, answer recall, QALD per-question F1) as MLflow GenAI
    scorers reading ``outputs`` (the answer) and ``expectations`` (``answers`` and ``answer_ids``)."""
    from mlflow.genai.scorers import scorer

    from hqa.scoring import metrics as M

    functions = {"exact_match": lambda p, g, _i: M.exact_match(p, g), "hits_at_1": M.hits_at_1,
                 "answer_recall": lambda p, g, _i: M.answer_recall(p, g),
                 "qald_f1": lambda p, g, i: M.qald_prf(p, g, i)[2]}

    def make(name: str, fn):
        def score(outputs, expectations) -> float:
            expectations = expectations or {}
            return round(float(fn(str(outputs or ""), list(expectations.get("answers") or []),
                                  list(expectations.get("answer_ids") or []))), 4)

        return scorer(score, name=name)

    return [make(name, functions[fname]) for name, fname in GENAI_SCORERS.items()]


def log_genai_evaluation(rows: list[dict], model_id: str | None = None):
    """Log ``rows`` (answers already computed: no second LM pass) through ``mlflow.genai.evaluate`` into the active
    MLflow run: its evaluation view lists every question with its answer, gold answers and one assessment per scorer
    of :func:`genai_scorers` (a failed question: empty answer, its error as a tag).  MLflow's EvaluationResult."""
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


@dataclass
class EvaluateRun:
    """What :func:`run_evaluate_job` did: the summary of its rows, the run folder (rows and report) and the MLflow
    run."""

    summary: EvalSummary
    folder: Path
    run_id: str
    label: str


def run_evaluate_job(settings, dataset: str, *, program: str | None = None, load: str | None = None,
                     program_kwargs: dict | None = None, limit: int | None = None, threads: int = 1,
                     out: Path | None = None, fresh: bool = False, traces: bool = False, budget: Budget | None = None,
                     progress: bool = True, warn: Callable[[str], None] | None = None,
                     estimate: Callable[[str], Callable | None] | None = None) -> EvaluateRun:
    """The evaluate job (MLflow run → work → run folder → report, as the compile and compare jobs): ``dataset``'s
    questions (at most ``limit``) answered by the program :func:`hqa.app.open_program` opens (its warnings to ``warn``)
    into the run folder ``out`` (default ``<artifacts>/eval/<label>-<dataset>``, resumed unless ``fresh``), the report
    written and logged to one MLflow run.  ``program_kwargs`` given (``{}`` too) is part of the run's tag.
    ``traces``: every question an MLflow trace, the rows in MLflow's evaluation view.  ``estimate(label)``: the
    :func:`evaluate` estimate callback of the run's label."""
    from hqa.app import open_program
    from hqa.data.datasets import load_examples
    from hqa.reports.summary import write_report
    from hqa.schemas.run_folder import RunFolder
    from hqa.tracking import runs as tracing
    from hqa.tracking.record import log_record, run_record

    examples = load_examples(dataset, limit)
    opened = open_program(settings, program=None if load else program, load=load,
                          program_kwargs=program_kwargs or {}, benchmark=dataset)
    for warning in opened.warnings:
        (warn or log.warning)(warning)
    label = opened.label.replace(":/", "-").replace("/", "-")
    out_dir = Path(out) if out else settings.artifacts_dir / "eval" / f"{label}-{dataset.replace('/', '-')}"
    tag = {"program": str(Path(load).resolve()) if load else (program or f"default:{opened.version}"),
           "dataset": dataset}
    if program_kwargs is not None:  # another configuration of the program is another run
        tag["program_kwargs"] = program_kwargs
    params = {"job": "evaluate", **tag, "limit": limit, "threads": threads, "out": str(out_dir),
              "lm": f"{settings.lm.provider}:{settings.lm.model or 'SmolLM2-135M'}"}
    with tracing.run(settings, f"evaluate:{label}:{dataset}", params=params, tags={"job": "evaluate"},
                     autolog=traces) as active:
        log_record(run_record(settings, program=opened.program, toolbox=opened.toolbox,
                              datasets={"eval": (dataset, examples)}))
        if traces:
            tracing.enable_traces(settings, opened, store=False)
        summary = evaluate(opened.program, examples, threads=threads, out=RunFolder(out_dir).rows_path,
                           resume=not fresh, progress=progress, tag=tag, budget=budget,
                           estimate=estimate(label) if estimate else None)
        if summary.n == 0:
            raise HQAError(f"dataset {dataset} gave no questions")
        write_report(out_dir, title=f"{label} on {dataset}")
        tracing.log_summary(summary, "eval")
        tracing.log_report(out_dir)
        if traces:  # MLflow's evaluation view: part of the tracing opt-in (it costs ~6.5 s a run, load ~0)
            log_genai_evaluation(summary.rows, model_id=tracing.logged_model_id(opened))
    return EvaluateRun(summary=summary, folder=out_dir, run_id=active.info.run_id, label=label)

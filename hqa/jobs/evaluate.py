"""Run a program over examples: metrics, cost and traces per question, appended to a JSONL file (resumable).

Each finished question is written as one line to the run folder's rows file (:mod:`hqa.schemas.run_folder`) as soon
as it is done, so an interrupted run loses at most the questions in flight and a rerun skips every id already
written.  LM replies are cached by DSPy, so even re-running a question costs no LM call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from hqa.jobs.budget import Budget, BudgetReached, profile
from hqa.jobs.engine import Engine, ProgramSpec, Question, RunRows, ThreadsEngine, progress_bar, row_id
from hqa.jobs.engine import run_one, usage_tokens  # noqa: F401 - imported from here by serve, reports and tests
from hqa.jobs.heap import settled
from hqa.errors import DataError, HQAError
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
    stopped: str | None = None  # why the run stopped before its last question (its budget), None when it did not

    @property
    def reliability(self) -> dict[str, float]:
        """The run's parse-failure, retry, fallback and error rates (:mod:`hqa.reports.reliability`)."""
        from hqa.reports.reliability import RELIABILITY_METRICS, reliability_stats

        stats = reliability_stats(self.rows)
        return {k: stats[k] for k in RELIABILITY_METRICS if stats[k] is not None}


def summarize(rows: list[dict]) -> tuple[dict[str, float], dict[str, float]]:
    n = max(len(rows), 1)
    metrics = {k: round(sum(r["scores"].get(k, 0.0) for r in rows) / n, 4) for k in ("em", "f1", "recall", "hits1")}
    cost = {k: round(sum(float(r.get(k) or 0) for r in rows) / n, 3)
            for k in ("lm_calls", "cached_lm_calls", "prompt_tokens", "cached_prompt_tokens", "completion_tokens",
                      "tool_calls", "seconds")}
    return metrics, cost


def evaluate(program, examples: Iterable, *, threads: int = 1, out: Path | None = None, resume: bool = True,
             progress: bool = False, on_row: Callable[[dict], None] | None = None,
             tag: dict[str, str] | None = None, max_lm_calls: int | None = None, budget: Budget | None = None,
             estimate: Callable[[dict | None, int, str], None] | None = None, probe: int = 2,
             lm_cache: bool = True, engine: Engine | None = None, spec: ProgramSpec | None = None) -> EvalSummary:
    """Evaluate ``program`` on ``examples`` (dspy.Example with question, answers, answer_ids, id).

    With ``out`` (a .jsonl path, its folder locked for the whole run: a second run on it refuses at once), rows are
    appended as they finish and ids already present are skipped.  ``tag`` (e.g. program and dataset) is kept beside
    ``out``; resuming rows another tag wrote is refused (:func:`hqa.schemas.run_folder.check_run_tag`).
    ``max_lm_calls``: a budget of LM requests for the questions this call asks; once the rows written reach it, the
    queued questions are dropped (as on Ctrl-C) and :class:`BudgetReached` is raised — the rows so far are kept, and
    a rerun resumes from them.  ``budget`` (:class:`hqa.jobs.budget.Budget`, which ``max_lm_calls`` is shorthand
    for) does the same for LM calls and dollars, and may be shared with other runs.

    A run stopped by its budget raises :class:`BudgetReached` holding the summary of the rows written
    (``summary``, its ``stopped`` saying why).  ``lm_cache=False``: DSPy's LM cache is off for these questions
    (:func:`uncached`).

    ``estimate(profile, left, source)`` is called once before the bulk of the work (:func:`_estimate`).  The
    questions are answered by ``engine`` (:mod:`hqa.jobs.engine`; default a :class:`~hqa.jobs.engine.ThreadsEngine`
    of ``threads``); an engine beyond this process (``engine.remote``: Ray) opens the program from ``spec``, which
    must then be given.
    """
    if engine is not None and engine.remote:
        if spec is None:
            raise HQAError("an engine beyond this process needs the program's recipe (ProgramSpec)")
        if not lm_cache:
            spec = dataclasses.replace(spec, lm_cache=False)
    if budget is None and max_lm_calls is not None:
        budget = Budget(max_lm_calls=max_lm_calls)
    with open_run(examples, out, tag, resume, on_row=on_row) as run, \
            progress_bar(len(run.ids), len(run.done), enabled=progress) as bar, uncached(not lm_cache):
        run.rows.bar = bar
        asking = _Asking(program, run, budget, engine, spec)
        try:
            with settled():  # the collector's policy while questions run (hqa.jobs.heap)
                estimating = estimate is not None and asking.todo
                first = _estimate(asking, run.done, estimate, probe, threads) if estimating else []
                asking.ask(asking.todo[len(first):], threads)
        except BudgetReached as exc:  # the rows so far are a finished, smaller run: their summary goes with the stop
            exc.summary = run.summary()
            exc.summary.stopped = str(exc)
            raise
    return run.summary()


@contextlib.contextmanager
def uncached(off: bool):
    """With ``off``, DSPy's LM cache is not read or written inside (the configured LM's copy with ``cache=False``):
    every request of a measured question reaches the LM, so its tokens, cost and time are its own, not an earlier
    run's or a dry run's (``hqa compare``'s arms, issue 53)."""
    import dspy

    lm = dspy.settings.lm
    if not off or lm is None or not getattr(lm, "cache", False):
        yield
        return
    with dspy.context(lm=lm.copy(cache=False)):
        yield


class OpenRun:
    """One run folder's questions while it is written (:func:`open_run`): ``done`` (the rows kept from an earlier
    run, by id), ``todo`` (the examples still to answer, in order) and ``rows`` (:class:`RunRows`, the rows this run
    writes)."""

    def __init__(self, examples: list, ids: list, done: dict, out: Path | None, on_row):
        self.examples, self.ids, self.done, self.out = examples, ids, done, out
        self.todo = [ex for ex in examples if row_id(ex) not in done]
        self.rows = RunRows(out, on_row)

    def all_rows(self) -> list[dict]:
        """Every question's row, in the examples' order (those not answered yet left out)."""
        return [r for r in (self.done.get(i) or self.rows.rows.get(i) for i in self.ids) if r is not None]

    def summary(self) -> EvalSummary:
        rows = self.all_rows()
        metrics, cost = summarize(rows)
        return EvalSummary(n=len(rows), metrics=metrics, cost=cost, errors=sum(1 for r in rows if r.get("error")),
                           path=self.out, rows=rows)


@contextlib.contextmanager
def open_run(examples: Iterable, out: Path | None, tag: dict | None, resume: bool,
             on_row: Callable[[dict], None] | None = None):
    """The :class:`OpenRun` of ``examples`` into the rows file ``out``, its folder locked until the block ends
    (:func:`hqa.schemas.run_folder.lock_folder`); ids must be unique; resumed unless not ``resume``
    (:func:`_kept_rows`)."""
    held = None
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        held = lock_folder(out.parent, out)
    try:
        examples = list(examples)
        ids = [row_id(ex) for ex in examples]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise DataError(f"duplicate example id {dup!r}: evaluation rows are keyed by id")
        yield OpenRun(examples, ids, _kept_rows(out, tag, examples, set(ids), resume), out, on_row)
    finally:
        if held is not None:
            held.close()


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
    starting = getattr(estimate, "starting", None)  # said before the dry run: it can take minutes
    if starting is not None:
        starting(f"asking the first {len(first)} of {len(asking.todo)} questions to measure them (a dry run, kept "
                 "in this run and charged to its budget)")
    try:
        asking.ask(first, min(threads, len(first)))
    except BudgetReached:  # the budget ran out during the dry run: what it measured is still said
        estimate(profile(asking.rows.values()), len(asking.todo) - len(asking.rows),
                 f"dry run stopped by the budget after {len(asking.rows)} of {len(first)} questions")
        raise
    estimate(profile(asking.rows.values()), len(asking.todo) - len(first),
             f"dry run of {len(first)} questions, kept in this run")
    return first


class _Asking:
    """The questions one evaluation still has to answer (``todo``), and the rows it wrote so far (``rows``)."""

    def __init__(self, program, run: OpenRun, budget: Budget | None, engine: Engine | None = None,
                 spec: ProgramSpec | None = None):
        self.program, self.run, self.budget, self.engine, self.spec = program, run, budget, engine, spec
        self.todo, self.out = run.todo, run.out
        self.rows = run.rows.rows

    def ask(self, batch: list, workers: int) -> None:
        """Answer ``batch`` on the engine (a :class:`ThreadsEngine` of ``workers`` threads when none was given),
        writing each row as it finishes; stop at the budget (:class:`BudgetReached` after the last row is
        written)."""
        if batch:
            self._check_budget(after=False)  # spent before this run began (a compile before its dev evaluation)
        engine = self.engine or ThreadsEngine(workers)
        engine.run([Question(self.program, ex, self.run.rows, spec=self.spec) for ex in batch], self.budget)
        self._check_budget(after=True)

    def _check_budget(self, after: bool) -> None:
        """BudgetReached when the budget is reached (``after`` a batch: only with questions left unasked)."""
        reason = self.budget.reached() if self.budget is not None else None
        if reason and (not after or len(self.rows) < len(self.todo)):
            kept = "the rows so far are kept" + (f" in {self.out}" if self.out is not None else "")
            raise BudgetReached(f"{reason} after {len(self.rows)} of {len(self.todo)} questions "
                                f"({self.budget.lm_calls} LM calls); {kept}" + (": rerun to resume" if after else ""))


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


def _write_info(settings, out_dir: Path, opened, tag: dict, limit: int | None, run_id: str,
                shard: dict | None = None) -> None:
    """The run folder's ``run-info.json`` (:mod:`hqa.jobs.run_info`): LM, price, world, command, MLflow run, and a
    shard's slice (:meth:`hqa.jobs.shards.Shard.record`)."""
    import shlex

    from hqa.jobs.budget import price_for
    from hqa.jobs.run_info import price_record, world_of, write_run_info

    lm = settings.lm
    source = ["--program", tag["program"]] if opened.source == "program" else ["--load", str(tag["program"])]
    kwargs = ["--program-kwargs", json.dumps(tag["program_kwargs"], sort_keys=True)] if tag.get("program_kwargs") else []
    lm_args = [] if lm.provider == "local" else ["--lm", lm.provider, "--model", lm.model]
    lm_args += ["--api-base", lm.api_base] if lm.api_base else []
    command = shlex.join(["hqa", "evaluate", *source, *kwargs, "--dataset", tag["dataset"],
                          *(["--limit", str(limit)] if limit else []), *lm_args,
                          *(["--shard", tag["shard"]] if tag.get("shard") else [])])
    write_run_info(out_dir, program=tag["program"], label=opened.label, program_kwargs=tag.get("program_kwargs") or {},
                   arm="none" if opened.source == "program" else "loaded", dataset=tag["dataset"], limit=limit,
                   seed=lm.seed, lm={"provider": lm.provider, "model": lm.model or "SmolLM2-135M",
                                     "api_base": lm.api_base or None},
                   price=price_record(price_for(lm)), world=world_of(settings, opened.toolbox), command=command,
                   mlflow_run_id=run_id, tracking_uri=settings.tracking_uri, **({"shard": shard} if shard else {}))


def default_folder(settings, label: str, dataset: str) -> str:
    """The run folder's name under ``artifacts/eval`` when ``--out`` is not given: ``<program>-<dataset>``, with
    each ``programs.*`` setting that is not its default after it (``simple-compmix-test-answerable-abstain-off``),
    so two configurations of one program never share — or wipe with ``--fresh`` — one folder; ``/`` and ``:`` become
    ``-`` (a ``:`` is not a file-name character everywhere)."""
    import dataclasses

    from hqa.config import ProgramsConfig

    defaults = ProgramsConfig()
    changed = [f"{f.name.replace('_', '-')}-{getattr(settings.programs, f.name)}"
               for f in dataclasses.fields(ProgramsConfig)
               if getattr(settings.programs, f.name) != getattr(defaults, f.name)]
    return "-".join([label, dataset.replace("/", "-").replace(":", "-"), *changed])


def pack_reach_note(settings, dataset: str, records) -> str | None:
    """One line when the programs read the knowledge pack (no world, offline sources) and the pack holds the gold
    answer of only some of ``records`` (the definition of docs/evaluation.md's answerable sets): the other questions
    can only be answered from the LM's memory, which a score near 0 would otherwise leave unsaid.  None for an
    ``:answerable`` set, a world, live sources, or a pack that holds every answer."""
    if ":answerable" in dataset or settings.world_dir is not None or not records:
        return None
    if (settings.text.kind, settings.linker.kind, settings.kg.kind) != ("pack", "pack", "oxigraph") or settings.kg.path:
        return None
    from hqa.data.answerable import answerable_ids
    from hqa.errors import DataError, PackMissingError

    try:
        held = len(answerable_ids(records, settings.pack_dir, spec=dataset))
    except (OSError, ValueError, DataError, PackMissingError):  # no pack yet: open_program has said so already
        return None
    if held == len(records):
        return None
    name = dataset.split(":")[0]
    return (f"the knowledge pack holds the gold answer of {held} of these {len(records)} {name} questions; the "
            f"others can only be answered from the LM's memory ({name}:answerable keeps the {held}; a world or live "
            "sources hold more: docs/worlds.md, docs/live.md)")


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
                     estimate: Callable[[str], Callable | None] | None = None, engine: Any = "threads",
                     workers: int | None = None, ray_address: str | None = None, shard=None) -> EvaluateRun:
    """The evaluate job (MLflow run → work → run folder → report, as the compile and compare jobs): ``dataset``'s
    questions (at most ``limit``) answered by the program :func:`hqa.app.open_program` opens (its warnings to ``warn``)
    into the run folder ``out`` (default ``<artifacts>/eval/<label>-<dataset>``, resumed unless ``fresh``), the report
    written and logged to one MLflow run.  ``program_kwargs`` given (``{}`` too) is part of the run's tag.
    ``traces``: every question an MLflow trace (or ``tracking.trace_share`` of them), the rows in MLflow's
    evaluation view.  ``estimate(label)``: the :func:`evaluate` estimate callback of the run's label.  ``engine``,
    ``workers``, ``ray_address``: :func:`hqa.jobs.engine.make_engine` (or ``engine`` an engine already made,
    :func:`hqa.jobs.engine.engine_in`).  ``shard`` (:class:`hqa.jobs.shards.Shard`):
    only that slice of the questions, into its own folder (default ``…-<dataset>-shardIofN``)."""
    from hqa.app import open_program
    from hqa.data.datasets import load_dataset
    from hqa.reports.summary import write_report
    from hqa.schemas.run_folder import RunFolder, refuse_foreign_rows
    from hqa.tracking import runs as tracing
    from hqa.tracking.record import log_record, run_record

    from hqa.jobs.engine import ProgramSpec, engine_in, row_id

    records = load_dataset(dataset, limit)
    whole = records
    if shard is not None:  # this shard's questions only (the note below counts them too)
        records = shard.take(records)
    examples = [r.to_example() for r in records]
    opened = open_program(settings, program=None if load else program, load=load,
                          program_kwargs=program_kwargs or {}, benchmark=dataset)
    for warning in opened.warnings:
        (warn or log.warning)(warning)
    label = opened.label.replace(":/", "-").replace("/", "-")
    folder_name = default_folder(settings, label, dataset) + (f"-{shard.label}" if shard is not None else "")
    out_dir = Path(out) if out else settings.artifacts_dir / "eval" / folder_name
    tag = {"program": str(Path(load).resolve()) if load else (program or f"default:{opened.version}"),
           "dataset": dataset}
    if program_kwargs is not None:  # another configuration of the program is another run
        tag["program_kwargs"] = program_kwargs
    if shard is not None:  # a shard folder is resumed only by the same shard
        tag["shard"] = str(shard)
    params = {"job": "evaluate", **tag, "limit": limit, "threads": threads, "out": str(out_dir),
              "lm": f"{settings.lm.provider}:{settings.lm.model or 'SmolLM2-135M'}", "engine": engine,
              **({"workers": workers} if workers else {})}
    spec = ProgramSpec.of(settings, program=None if load else program, load=load, program_kwargs=program_kwargs or {},
                          benchmark=dataset)
    refuse_foreign_rows(RunFolder(out_dir).rows_path, tag, examples, resume=not fresh)  # before any note or run
    reach = pack_reach_note(settings, dataset, records)
    if reach:
        (warn or log.warning)(reach)
    with tracing.run(settings, f"evaluate:{label}:{dataset}", params=params, tags={"job": "evaluate"},
                     autolog=traces) as active:
        log_record(run_record(settings, program=opened.program, toolbox=opened.toolbox,
                              datasets={"eval": (dataset, examples)}))
        trace_spec = None
        if traces:
            trace_spec = tracing.TraceSpec.of(settings, active.info.run_id,
                                              tracing.enable_traces(settings, opened, store=False))
        stop = None
        try:
            with contextlib.ExitStack() as stack:
                runner = engine_in(stack, engine, threads=threads, workers=workers, address=ray_address,
                                   traces=trace_spec)
                summary = evaluate(opened.program, examples, threads=threads, out=RunFolder(out_dir).rows_path,
                                   resume=not fresh, progress=progress, tag=tag, budget=budget,
                                   estimate=estimate(label) if estimate else None, engine=runner, spec=spec)
        except BudgetReached as exc:  # a finished run over fewer rows, marked as stopped (not a failed run)
            if exc.summary is None or exc.summary.n == 0:
                raise
            stop, summary = exc, exc.summary
            import mlflow

            mlflow.set_tag("hqa.stopped", str(exc)[:500])
        if summary.n == 0:
            raise HQAError(f"dataset {dataset} gave no questions")
        write_report(out_dir, title=f"{label} on {dataset}" + (" (stopped at its budget)" if stop else ""))
        _write_info(settings, out_dir, opened, tag, limit, active.info.run_id,
                    shard=shard.record(whole, [row_id(ex) for ex in examples]) if shard is not None else None)
        tracing.log_summary(summary, "eval")
        tracing.log_report(out_dir)
        if traces:  # MLflow's evaluation view: part of the tracing opt-in (it costs ~6.5 s a run, load ~0)
            log_genai_evaluation(summary.rows, model_id=tracing.logged_model_id(opened))
    done = EvaluateRun(summary=summary, folder=out_dir, run_id=active.info.run_id, label=label)
    if stop is not None:  # the MLflow run ended FINISHED with its metrics; the caller hears of the stop
        stop.run = done
        raise stop
    return done

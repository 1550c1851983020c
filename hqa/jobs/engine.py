"""The per-question engine every batch job answers through: ``hqa evaluate``'s question threads, ``hqa study``'s one
pool over all of its cells' questions (issue 54), and the same on Ray beyond one process (issue 55).

:func:`run_one` answers one question into its predictions row.  A :class:`Question` is one example to answer with one
program (and, for a study, its cell's LM), and the :class:`RunRows` its row goes to: the run folder's rows file,
appended as each question finishes.  An :class:`Engine` answers a list of questions, charges each finished row to a
shared :class:`~hqa.jobs.budget.Budget`, starts no question once the budget is reached (or once a question's ``skip``
says so: a study's failed cell), and on Ctrl-C or a failed write drops what is queued — the questions in flight
finish, their rows are not written, a rerun asks them again.  :class:`ThreadsEngine` is a thread pool of ``threads``
workers in this process; :class:`hqa.jobs.ray_engine.RayEngine` spreads the same questions over Ray actors in other
processes or machines, each opening the program from the question's :class:`ProgramSpec` (a question carries its
program's recipe, example and LM, not a closure).  Either way the rows are kept by the caller's process, in the order
questions finish.  :func:`make_engine` builds the one a command names (``--engine``).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from hqa.errors import ConfigError, HQAError
from hqa.jobs.budget import Budget, BudgetStop
from hqa.schemas.trace import failed_sources
from hqa.scoring.metrics import score_all


class RunRows:
    """Where one run's rows go: ``rows`` by id, appended to the rows file ``out`` (None: kept in memory only) as each
    question finishes, then ``on_row`` and the progress ``bar`` (a tqdm) told."""

    def __init__(self, out: Path | None, on_row: Callable[[dict], None] | None = None, bar: Any = None):
        self.out, self.on_row, self.bar = out, on_row, bar
        self.rows: dict[Any, dict] = {}
        self._lock = threading.Lock()

    def keep(self, row: dict) -> None:
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


@dataclass(frozen=True)
class ProgramSpec:
    """How another process opens the program a question is answered with, as plain data (picklable): the settings
    (:meth:`hqa.config.Settings.as_dict`, the artifacts folder made absolute), and what
    :func:`hqa.app.open_program` is given — a built-in ``program`` with its ``program_kwargs``, or ``load`` (a saved
    folder, ``models:/`` or ``runs:/`` URI), the ``benchmark`` whose HumanIQ library an uncompiled HumanIQ program
    draws on; ``lm_cache`` False: DSPy's LM cache off for its questions (``hqa compare``'s arms, a study's cells)."""

    settings: dict
    program: str | None = None
    load: str | None = None
    program_kwargs: dict | None = None
    benchmark: str | None = None
    lm_cache: bool = True
    student: bool = False  # a compile's student: an uncompiled HumanIQ program without its human processes

    @classmethod
    def of(cls, settings: Any, **fields: Any) -> "ProgramSpec":
        data = settings.as_dict()
        data["paths"] = {**data["paths"], "artifacts": str(settings.artifacts_dir)}  # the same folder everywhere
        if fields.get("load") is not None:
            load = str(fields["load"])
            fields["load"] = load if load.startswith(("models:/", "runs:/")) else str(Path(load).resolve())
        return cls(settings=data, **fields)

    @property
    def key(self) -> str:
        """The spec's identity: a worker opens each spec once."""
        text = json.dumps([self.settings, self.program, self.load, self.program_kwargs, self.benchmark,
                           self.lm_cache, self.student], sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def open(self, toolboxes: dict | None = None) -> tuple[Any, Any, Any]:
        """``(program, lm, adapter)``: the program opened through :func:`hqa.app.open_program` (DSPy not configured
        globally: each question is answered inside ``dspy.context`` with this LM and adapter).  ``toolboxes``: the
        toolboxes opened so far, by :func:`sources_key` — specs that differ only in their LM share one."""
        from hqa.app import open_program, warm_up
        from hqa.config import Settings
        from hqa.lm.adapters import adapter_for
        from hqa.lm.models import build_lm
        from hqa.toolbox import Toolbox

        settings = Settings(**self.settings)
        toolbox = None
        if toolboxes is not None:
            key = sources_key(settings)
            if key not in toolboxes:
                toolboxes[key] = Toolbox(settings)
            toolbox = toolboxes[key]
        opened = open_program(settings, program=None if self.load else self.program, load=self.load,
                              program_kwargs=self.program_kwargs, configure=False, check_lm=False,
                              benchmark=self.benchmark, student=self.student, toolbox=toolbox)
        import dspy

        dspy.configure_cache(disk_cache_dir=str(settings.artifacts_dir / "cache" / "dspy"))
        lm = build_lm(settings)
        if not self.lm_cache:
            lm = lm.copy(cache=False)
        warm_up(settings, opened)
        return opened.program, lm, adapter_for(settings.lm)


def sources_key(settings: Any) -> str:
    """What decides a toolbox: every setting but the LM's (cells or specs with the same key share one)."""
    return json.dumps({k: v for k, v in settings.as_dict().items() if k != "lm"}, sort_keys=True, default=str)


@dataclass
class Question:
    """One example to answer with ``program`` into ``rows``; ``lm`` and ``adapter`` (a study's cell) are the DSPy LM
    and adapter it is answered with (None: the ones configured); ``skip()`` true: not asked (its cell failed).
    ``spec``: how another process opens the same program with the same LM (:class:`ProgramSpec`; an engine beyond
    this process needs it)."""

    program: Any
    example: Any
    rows: RunRows | None
    lm: Any = None
    adapter: Any = None
    skip: Callable[[], bool] | None = None
    price: Any = None  # the cell LM's hqa.jobs.budget.Price its row is charged at (None: the budget's own)
    spec: ProgramSpec | None = None

    def ask(self, *recorders: Any) -> dict:
        """The question's predictions row (:func:`run_one`: never raises but for a budget's
        :class:`~hqa.jobs.budget.BudgetStop`); ``recorders`` record it too (a budget's question guard)."""
        if self.lm is None:
            return run_one(self.program, self.example, recorders)
        import dspy

        with dspy.context(lm=self.lm, **({"adapter": self.adapter} if self.adapter is not None else {})):
            return run_one(self.program, self.example, recorders)


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


def run_one(program, example, recorders: Sequence[Any] = ()) -> dict[str, Any]:
    """Answer one example; never raises (an exception becomes the row's ``error``) but for a budget's stop
    (:class:`~hqa.jobs.budget.BudgetStop`, a ``BaseException``: the question is not finished, it has no row).
    ``recorders`` (:func:`hqa.lm.calls.recording`) record the question beside hqa's own."""
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
        with asking(program, counter, demos, prompts, *recorders):
            pred = program(question=example.question)
        trace = getattr(pred, "trace", None) or {}
        prompt_t, completion_t, cached_t = usage_tokens(pred)
        # the one answer shape (hqa.answering.presentation.prediction_fields): an abstention's answer is None (never right)
        row.update(**prediction_fields(pred, counter.failures), trace=trace, error=None, prompt_tokens=prompt_t,
                   completion_tokens=completion_t, tool_calls=len(trace.get("tool_calls", []) or []),
                   demos=demos.used, cached_prompt_tokens=cached_t)
        failed = failed_sources(trace)
        if "kg" in failed:  # answered without the KG because the endpoint was down: asked again on resume
            row["degraded"] = f"SPARQL endpoint unavailable: {failed['kg']}"[:500]
        elif "linker" in failed:  # likewise answered without entity links (an outage the GuardedLinker observed)
            row["degraded"] = failed["linker"][:500]
    except Exception as exc:  # noqa: BLE001 - one failing question must not lose the run
        row.update(answer="", trace={}, error=f"{type(exc).__name__}: {exc}"[:500], prompt_tokens=0,
                   completion_tokens=0, tool_calls=0, cached_prompt_tokens=0, fallback=None)
    row.update(counter.counts())  # lm_calls, cached_lm_calls, retries, parse_failures
    row["lm_prompts"] = prompts.calls
    row["seconds"] = round(time.monotonic() - start, 3)
    row["scores"] = score_all(row["answer"] or "", row["gold"], row["gold_ids"])
    return row


def row_id(example) -> str | None:
    """The id a predictions row keys ``example`` by: its ``id`` as a string (rows hold string ids only)."""
    value = example.get("id")
    return None if value is None else str(value)


class Engine(Protocol):
    """Answers ``questions``, keeping each finished row in its question's :class:`RunRows`, charging it to
    ``budget`` and starting none once the budget is reached; on an exception (Ctrl-C) the queued ones are dropped.
    ``remote``: the questions are answered in other processes, from their :class:`ProgramSpec`.  An engine is a
    context manager; :meth:`close` ends what it started (Ray's workers)."""

    remote: bool

    def run(self, questions: Sequence[Question], budget: Budget | None = None) -> None: ...

    def close(self) -> None: ...


class ThreadsEngine:
    """:class:`Engine` on a pool of ``threads`` threads; each question runs in a copy of the caller's context.
    ``traces`` (:class:`hqa.tracking.runs.TraceSpec`): with tracing on, the questions it does not sample are not
    traced."""

    remote = False

    def __init__(self, threads: int = 1, traces: Any = None):
        self.threads = max(1, int(threads))
        self.traces = traces

    def __enter__(self) -> "ThreadsEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to end: the pool of each :meth:`run` ends with it."""

    def run(self, questions: Sequence[Question], budget: Budget | None = None) -> None:
        """Each LM request is charged to the budget as it is sent and refused once the budget is reached
        (:meth:`~hqa.jobs.budget.Budget.question_guard`: an LM-call budget holds exactly), and a worker starts no
        question then: a question whose request was refused has no row (a rerun asks it again), those that finished
        in flight keep theirs, the queued ones are never asked.  Each finished question's dollars are charged from
        its usage."""
        stop = threading.Event()
        with ThreadPoolExecutor(max_workers=self.threads) as pool:
            futures = {pool.submit(contextvars.copy_context().run, _attempt, q, stop, budget, self.traces): q
                       for q in questions}
            try:
                for fut in as_completed(futures):
                    try:
                        row = fut.result()
                    except BudgetStop:  # the question's next LM request was past the budget: not finished
                        stop.set()
                        continue
                    if row is not None:
                        futures[fut].rows.keep(row)
            except BaseException:
                # Ctrl-C or a failed write: drop the queued questions instead of running them all before exiting;
                # only those already in flight finish (their rows are not written, a rerun asks them again)
                stop.set()
                for f in futures:
                    f.cancel()
                raise


def _attempt(question: Question, stop: threading.Event, budget: Budget | None, traces: Any = None) -> dict | None:
    if stop.is_set() or (question.skip is not None and question.skip()) or (budget is not None and budget.reached()):
        return None  # not asked: the budget was reached, the run is stopping, or the question's cell failed
    with traced(traces, question.example):
        if budget is None:
            return question.ask()
        row = question.ask(budget.question_guard())  # its LM requests charged as they are sent
    budget.charge(row, lm_calls=0, price=question.price)  # its dollars, from its usage
    if budget.reached():
        stop.set()
    return row


def traced(traces: Any, example: Any, remote: bool = False):
    """The trace scope of one question (:meth:`hqa.tracking.runs.TraceSpec.question`), nothing without ``traces``."""
    if traces is None:
        return contextlib.nullcontext()
    return traces.question(row_id(example), remote=remote)


#: the engines ``--engine`` names → their class (:func:`hqa.registry.resolve`: Ray is imported only when named)
ENGINES = {"threads": "hqa.jobs.engine:ThreadsEngine", "ray": "hqa.jobs.ray_engine:RayEngine"}


def engine_in(stack: contextlib.ExitStack, engine: "str | Engine", traces: Any = None, **kwargs: Any) -> Engine:
    """``engine`` itself when it is one already (the caller ends it: an engine shared by several jobs; ``traces``,
    this job's trace spec, is its own until ``stack`` ends), else :func:`make_engine` of that name, ``traces`` and
    ``kwargs``, ended with ``stack``."""
    if not isinstance(engine, str):
        if traces is not None:
            stack.callback(setattr, engine, "traces", engine.traces)
            engine.traces = traces
        return engine
    return stack.enter_context(make_engine(engine, traces=traces, **kwargs))


def make_engine(name: str = "threads", threads: int = 1, workers: int | None = None, address: str | None = None,
                traces: Any = None) -> Engine:
    """The engine a command names: ``threads`` (``threads`` questions at once in this process) or ``ray``
    (:class:`hqa.jobs.ray_engine.RayEngine`: ``workers`` actors, default the cluster's or this machine's cores,
    ``threads`` questions in flight across them; ``address`` or ``$RAY_ADDRESS`` a running cluster, else a local one)."""
    if name == "threads":
        if workers is not None or address:
            raise ConfigError("--workers and --ray-address go with --engine ray")
        return ThreadsEngine(threads, traces=traces)
    if name == "ray":
        from hqa.registry import resolve

        return resolve(ENGINES["ray"])(workers=workers, threads=threads,
                                       address=address or os.environ.get("RAY_ADDRESS") or None, traces=traces)
    raise ConfigError(f"unknown engine {name!r}; one of: {', '.join(ENGINES)}")


@contextlib.contextmanager
def progress_bar(total: int, done: int, desc: str = "evaluate", enabled: bool = True):
    """A tqdm bar over ``total`` questions, ``done`` of them already answered (None when not ``enabled``)."""
    if not enabled:
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(total=total, initial=done, desc=desc, unit="q")
    try:
        yield bar
    finally:
        bar.close()


__all__ = ["ENGINES", "Engine", "ProgramSpec", "Question", "RunRows", "ThreadsEngine", "engine_in", "make_engine",
           "progress_bar",
           "row_id", "run_one", "traced", "usage_tokens"]

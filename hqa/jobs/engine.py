"""The per-question engine every batch job answers through: ``hqa evaluate``'s question threads and ``hqa study``'s
one pool over all of its cells' questions (issue 54).

:func:`run_one` answers one question into its predictions row.  A :class:`Question` is one example to answer with one program (and, for a study, its cell's LM), and the
:class:`RunRows` its row goes to: the run folder's rows file, appended as each question finishes.  An :class:`Engine`
answers a list of questions, charges each finished row to a shared :class:`~hqa.jobs.budget.Budget`, starts no
question once the budget is reached (or once a question's ``skip`` says so: a study's failed cell), and on Ctrl-C or a
failed write drops what is queued — the questions in flight finish, their rows are not written, a rerun asks them
again.  :class:`ThreadsEngine` is the one engine so far: a thread pool of ``threads`` workers.  Another engine (a Ray
pool, say) takes the same questions: a question carries its program, example and LM, not a closure, and the rows are
kept by the caller's process, in the order questions finish.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from hqa.errors import HQAError
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


@dataclass
class Question:
    """One example to answer with ``program`` into ``rows``; ``lm`` and ``adapter`` (a study's cell) are the DSPy LM
    and adapter it is answered with (None: the ones configured); ``skip()`` true: not asked (its cell failed)."""

    program: Any
    example: Any
    rows: RunRows
    lm: Any = None
    adapter: Any = None
    skip: Callable[[], bool] | None = None
    price: Any = None  # the cell LM's hqa.jobs.budget.Price its row is charged at (None: the budget's own)

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
    ``budget`` and starting none once the budget is reached; on an exception (Ctrl-C) the queued ones are dropped."""

    def run(self, questions: Sequence[Question], budget: Budget | None = None) -> None: ...


class ThreadsEngine:
    """:class:`Engine` on a pool of ``threads`` threads; each question runs in a copy of the caller's context."""

    def __init__(self, threads: int = 1):
        self.threads = max(1, int(threads))

    def run(self, questions: Sequence[Question], budget: Budget | None = None) -> None:
        """Each LM request is charged to the budget as it is sent and refused once the budget is reached
        (:meth:`~hqa.jobs.budget.Budget.question_guard`: an LM-call budget holds exactly), and a worker starts no
        question then: a question whose request was refused has no row (a rerun asks it again), those that finished
        in flight keep theirs, the queued ones are never asked.  Each finished question's dollars are charged from
        its usage."""
        stop = threading.Event()
        with ThreadPoolExecutor(max_workers=self.threads) as pool:
            futures = {pool.submit(contextvars.copy_context().run, _attempt, q, stop, budget): q for q in questions}
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


def _attempt(question: Question, stop: threading.Event, budget: Budget | None) -> dict | None:
    if stop.is_set() or (question.skip is not None and question.skip()) or (budget is not None and budget.reached()):
        return None  # not asked: the budget was reached, the run is stopping, or the question's cell failed
    if budget is None:
        return question.ask()
    row = question.ask(budget.question_guard())  # its LM requests charged as they are sent
    budget.charge(row, lm_calls=0, price=question.price)  # its dollars, from its usage
    if budget.reached():
        stop.set()
    return row


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


__all__ = ["Engine", "Question", "RunRows", "ThreadsEngine", "progress_bar", "row_id", "run_one", "usage_tokens"]

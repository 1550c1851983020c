"""The Ray engine (``--engine ray``, issue 55): a batch job's questions answered by Ray actors in other processes —
on this machine (a local Ray started for the run) or on a cluster (``--ray-address`` / ``$RAY_ADDRESS``) — behind the
same :class:`~hqa.jobs.engine.Engine` protocol as the question threads.

Each worker is one actor: it opens every program it is asked with once, through :func:`hqa.app.open_program` from the
question's :class:`~hqa.jobs.engine.ProgramSpec` (a built-in program, a saved folder or a ``models:/`` URI, with the
settings of the driver), keeps DSPy's LM and adapter of that spec and answers each question inside ``dspy.context``
with them, through :func:`hqa.jobs.engine.run_one` — the per-question code the threads engine runs.  A worker
answers up to ``ceil(threads / workers)`` questions at once (a threaded actor), so ``--threads`` is the number of
questions in flight across all workers, as with the threads engine.

The driver (the process running the command) keeps everything else:

* **rows**: each finished row comes back to it and goes to its question's :class:`~hqa.jobs.engine.RunRows` (the run
  folder's rows file, the progress bar), under the folder's lock; resume works as with threads.
* **the budget**: an LM-call budget is a *desk*, one small Ray actor the driver starts with the LM requests the
  budget has left; every worker asks it before sending each LM request (:func:`hqa.jobs.budget.request_guard`, the
  threads engine's guard), so the limit holds exactly across workers: the first refused request stops its question
  (no row, a rerun asks it again) and the driver starts no further question.  Dollars are charged by the driver from
  each finished row's usage, at its question's price; once they reach a cost budget the driver closes the desk.  At
  the end the driver's :class:`~hqa.jobs.budget.Budget` is charged the requests the desk granted.
* **workers that die**: a worker whose process ends (killed, out of memory, its node gone) takes its questions in
  flight with it — they have no row, and the driver queues them first again for the other workers and a new
  worker started in its place (at most ``workers × 3`` replacements a run; then the run stops with the rows kept).
  A row is kept only when it comes back, and each question is asked by one worker at a time: none is lost, none is
  written twice.
* **traces**: with tracing on, each worker traces into the job's tracking store, each trace attached to the job's
  MLflow run and tagged as in the driver (:class:`hqa.tracking.runs.TraceSpec`: every question, or the sampled
  share ``tracking.trace_share``).

A worker's exception that is not its process dying (its program cannot be opened there: a world path missing on
that node, an LM it cannot reach) ends the run with one line naming it; the rows so far are kept.
"""

from __future__ import annotations

import math
import os
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

from hqa.errors import ConfigError, HQAError
from hqa.jobs.budget import Budget, BudgetStop, request_guard
from hqa.jobs.engine import ProgramSpec, Question, traced

#: replacements of dead workers allowed per worker in one run before the run stops
REPLACEMENTS_PER_WORKER = 3
#: seconds the workers may take to start (Ray placing them on CPUs) before the command says why they did not
START_SECONDS = 300.0


def _ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("--engine ray needs Ray: pip install 'hqa[ray]'") from None
    return ray


def example_data(example: Any) -> dict:
    """An example as plain data for another process (its fields and input keys)."""
    return {"fields": dict(example.toDict()), "inputs": sorted(example.inputs().keys())}


def example_of(data: dict):
    import dspy

    return dspy.Example(**data["fields"]).with_inputs(*data["inputs"])


class Desk:
    """The LM requests a run may still send (``left``; None: no LM-call limit), granted one at a time to the
    workers; :meth:`close` refuses every later one (the driver's cost budget reached)."""

    def __init__(self, left: int | None, closed: bool = False):
        self.left, self.closed, self.sent = left, closed, 0

    def request(self) -> bool:
        if self.closed or (self.left is not None and self.sent >= self.left):
            return False
        self.sent += 1
        return True

    def open(self) -> bool:
        return not self.closed and (self.left is None or self.sent < self.left)

    def close(self) -> None:
        self.closed = True

    def granted(self) -> int:
        return self.sent


class _DeskCharger:
    """A worker's view of the desk, as the budget guard takes it (``charge_request``)."""

    def __init__(self, desk):
        self.desk = desk

    def charge_request(self) -> None:
        if not _ray().get(self.desk.request.remote()):
            raise BudgetStop()


class Worker:
    """One Ray actor: the programs it was asked with, opened once each (by :attr:`ProgramSpec.key`), and the
    questions it answers with them."""

    def __init__(self):
        from hqa.io.logs import quiet_libraries

        quiet_libraries()
        self.opened: dict[str, tuple] = {}
        self.toolboxes: dict[str, Any] = {}  # one per sources configuration (hqa.jobs.engine.sources_key)
        self.tracing: set[tuple[str, str]] = set()  # the tracking stores and experiments this worker traces into
        self.lock = threading.Lock()

    def prepare(self, specs: list[ProgramSpec]) -> int:
        """Open each of ``specs`` now (before any question); this worker's pid."""
        for spec in specs:
            self._opened(spec)
        return os.getpid()

    def _opened(self, spec: ProgramSpec) -> tuple:
        with self.lock:
            if spec.key not in self.opened:
                self.opened[spec.key] = spec.open(self.toolboxes)
            return self.opened[spec.key]

    def _trace_into(self, traces: Any) -> None:
        key = (traces.uri, traces.experiment)
        with self.lock:
            if key not in self.tracing:
                traces.start_here()
                self.tracing.add(key)

    def answer(self, spec: ProgramSpec, example: dict, desk: Any = None,
               traces: Any = None) -> tuple[str, dict | None]:
        """``("row", row)``; ``("budget", None)`` when a request of this question was refused (not finished), or
        ``("closed", None)`` when the budget was reached before it started (not asked).  ``traces``: the job's
        :class:`~hqa.tracking.runs.TraceSpec` when its questions are traced."""
        program, lm, adapter = self._opened(spec)
        ex = example_of(example)
        if desk is not None and not _ray().get(desk.open.remote()):
            return "closed", None
        if traces is not None:
            self._trace_into(traces)
        question = Question(program, ex, rows=None, lm=lm, adapter=adapter)
        try:
            with traced(traces, ex, remote=True):
                row = question.ask(request_guard(_DeskCharger(desk))) if desk is not None else question.ask()
        except BudgetStop:
            return "budget", None
        return "row", row

    def usage(self) -> dict:
        """This worker's pid and CPU seconds, its child processes' (the SPARQL store's workers) included
        (:func:`hqa.io.cpu.tree_cpu_seconds`)."""
        from hqa.io.cpu import tree_cpu_seconds

        return {"pid": os.getpid(), "cpu": tree_cpu_seconds()}


@dataclass
class _Slot:
    """One worker place: the actor in it now and its questions in flight."""

    actor: Any
    load: int = 0


class RayEngine:
    """:class:`~hqa.jobs.engine.Engine` on ``workers`` Ray actors (default: the cluster's CPUs, one each), ``threads``
    questions in flight across them; ``address``: a running Ray cluster (``ray://…`` or ``host:port``; None: a
    local Ray of this machine's cores, started for the run and stopped by :meth:`close`, unless this process already
    started one).  ``traces``: :class:`hqa.tracking.runs.TraceSpec` when questions are traced.  The module docstring
    says what the driver and the workers each do."""

    remote = True

    def __init__(self, workers: int | None = None, threads: int = 1, address: str | None = None, traces: Any = None,
                 cpus_per_worker: float = 1.0):
        if workers is not None and workers < 1:
            raise ConfigError(f"--workers must be at least 1, got {workers}")
        self.workers, self.threads, self.address, self.traces = workers, max(1, int(threads)), address, traces
        self.cpus_per_worker = cpus_per_worker
        self.slots: list[_Slot] = []
        self.env_names: tuple[str, ...] = ()
        self.prepared: set[str] = set()
        self.replaced = 0
        self.usage: dict[int, float] = {}  # pid → CPU seconds, of every worker seen (bench_throughput reads it)
        self._started_ray = False

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def __enter__(self) -> "RayEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _connect(self):
        ray = _ray()
        if not ray.is_initialized():
            import logging

            kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
            if self.address:
                ray.init(address=self.address, **kwargs)
            else:
                ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, **kwargs)
                self._started_ray = True
        return ray

    def start(self, env_names: list[str] = ()) -> None:
        """The workers, once per engine, each answering up to ``ceil(threads / workers)`` questions at once
        (``env_names``: variables they need from this process's environment, the LMs' API keys)."""
        if self.slots:
            return
        ray = self._connect()
        cpus = int(ray.cluster_resources().get("CPU", 0))
        workers = self.workers or max(1, int(cpus // self.cpus_per_worker))
        if workers * self.cpus_per_worker > cpus:
            raise ConfigError(f"--workers {workers} needs {workers * self.cpus_per_worker:g} CPUs; the Ray cluster "
                              f"has {cpus}")
        self.workers = workers
        self.env_names = tuple(env_names)
        self.slots = [_Slot(self._new_actor()) for _ in range(workers)]
        try:  # placed and running: a cluster whose CPUs other work holds would keep them waiting
            ray.get([slot.actor.usage.remote() for slot in self.slots], timeout=START_SECONDS)
        except ray.exceptions.GetTimeoutError:
            free = ray.available_resources().get("CPU", 0)
            self.close(collect=False)  # workers never placed have no CPU to collect (asking would wait on them)
            raise HQAError(f"{workers} Ray workers of {self.cpus_per_worker:g} CPU did not start within "
                           f"{START_SECONDS:g} s: the cluster has {cpus} CPUs, {free:g} free; ask for fewer --workers "
                           "or free the cluster") from None

    def _new_actor(self):
        ray = _ray()
        per_worker = math.ceil(self.threads / (self.workers or 1))
        options: dict[str, Any] = {"num_cpus": self.cpus_per_worker, "max_concurrency": per_worker + 2,
                                   "max_restarts": 0}
        names = (*_FORWARDED_ENV, *self.env_names)
        forwarded = {k: v for k, v in os.environ.items() if k in names or k.startswith("HQA_")}
        if forwarded and self.address:  # a local Ray inherits this process's environment already
            options["runtime_env"] = {"env_vars": forwarded}
        return ray.remote(Worker).options(**options).remote()

    def close(self, collect: bool = True) -> None:
        """Collect the workers' CPU (:attr:`usage`, unless not ``collect``), end them, and the local Ray this engine
        started."""
        if not self.slots and not self._started_ray:
            return
        ray = _ray()
        if collect:
            self.collect_usage()
        for slot in self.slots:
            ray.kill(slot.actor)
        self.slots, self.prepared = [], set()
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    def collect_usage(self) -> dict[int, float]:
        """Each live worker's CPU seconds so far, by pid (kept in :attr:`usage`), all asked at once and waited for
        30 s in all (a worker gone or busy past that keeps its last figure)."""
        ray = _ray()
        refs = [slot.actor.usage.remote() for slot in self.slots]
        ready, _late = ray.wait(refs, num_returns=len(refs), timeout=30) if refs else ([], [])
        for ref in ready:
            try:
                got = ray.get(ref)
            except Exception:  # noqa: BLE001 - a worker gone: its last figure stays
                continue
            self.usage[got["pid"]] = got["cpu"]
        return self.usage

    def pids(self) -> list[int]:
        """The workers' process ids (a test kills one)."""
        ray = _ray()
        return [ray.get(slot.actor.usage.remote(), timeout=60)["pid"] for slot in self.slots]

    # -- the run -----------------------------------------------------------------------------------------------
    def run(self, questions: Sequence[Question], budget: Budget | None = None) -> None:
        """Answer ``questions`` on the workers; see the module docstring."""
        if not questions:
            return
        missing = [q for q in questions if q.spec is None]
        if missing:
            raise HQAError("this job's questions carry no program recipe (ProgramSpec): it cannot run on Ray")
        self.start(sorted({str(q.spec.settings.get("lm", {}).get("api_key_env") or "") for q in questions} - {""}))
        ray = _ray()
        desk = None
        if budget is not None:
            if budget.reached():
                return
            left = None if budget.max_lm_calls is None else max(0, budget.max_lm_calls - budget.lm_calls)
            desk = ray.remote(Desk).options(num_cpus=0).remote(left)
        try:
            self._prepare({q.spec.key: q.spec for q in questions})
            self._dispatch(list(questions), budget, desk)
        finally:
            if desk is not None:
                try:
                    budget.charge({}, lm_calls=ray.get(desk.granted.remote(), timeout=60))
                finally:
                    ray.kill(desk)

    def _prepare(self, specs: dict[str, ProgramSpec]) -> None:
        """Every worker opens the specs it has not opened yet (a worker that dies meanwhile is replaced)."""
        ray = _ray()
        todo = [s for k, s in specs.items() if k not in self.prepared]
        if not todo:
            return
        pending = {slot.actor.prepare.remote(todo): slot for slot in self.slots}
        failed = None
        while pending:
            ref, slot = next(iter(pending.items()))
            del pending[ref]
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                self._replace(slot, slot.actor)
                pending[slot.actor.prepare.remote(todo)] = slot
            except ray.exceptions.RayTaskError as exc:  # every worker's answer is read before saying so
                failed = failed or exc
        if failed is not None:
            raise HQAError(f"a Ray worker could not open the program: {_cause(failed)}") from None
        self.prepared.update(s.key for s in todo)

    def _replace(self, slot: _Slot, dead: Any) -> None:
        """A new actor in ``slot`` in place of ``dead`` (once per dead actor)."""
        if slot.actor is not dead:
            return
        self.replaced += 1
        if self.replaced > REPLACEMENTS_PER_WORKER * len(self.slots):
            raise HQAError(f"Ray workers died {self.replaced} times in this run; the rows so far are kept and a "
                           "rerun resumes (the workers' logs: the Ray session's logs folder)")
        _ray().kill(dead)
        slot.actor, slot.load = self._new_actor(), 0
        self.prepared = set()  # the new worker opens the programs on its first question

    def _dispatch(self, questions: list[Question], budget: Budget | None, desk: Any) -> None:
        ray = _ray()
        cap = math.ceil(self.threads / len(self.slots))
        pending: deque[Question] = deque(questions)
        inflight: dict[Any, tuple[Question, _Slot, Any]] = {}
        stopping = False
        try:
            while inflight or (pending and not stopping):
                while pending and not stopping:
                    slot = min(self.slots, key=lambda s: s.load)
                    if slot.load >= cap:
                        break
                    question = pending.popleft()
                    if question.skip is not None and question.skip():
                        continue  # its cell failed
                    if budget is not None and budget.reached():
                        stopping = True
                        break
                    ref = slot.actor.answer.remote(question.spec, example_data(question.example), desk,
                                                   self.traces)
                    inflight[ref] = (question, slot, slot.actor)
                    slot.load += 1
                if not inflight:
                    break
                ready, _ = ray.wait(list(inflight), num_returns=1)
                for ref in ready:
                    question, slot, actor = inflight.pop(ref)
                    if slot.actor is actor:
                        slot.load -= 1
                    try:
                        kind, row = ray.get(ref)
                    except ray.exceptions.RayActorError:  # the worker died: asked again, first, by another
                        self._replace(slot, actor)
                        pending.appendleft(question)
                        continue
                    except ray.exceptions.RayTaskError as exc:
                        raise HQAError(f"a Ray worker failed: {_cause(exc)}") from None
                    if kind != "row":  # refused by the budget: not finished, no row
                        stopping = True
                        continue
                    if budget is not None:
                        budget.charge(row, lm_calls=0, price=question.price)
                        if budget.reached():
                            stopping = True
                            desk.close.remote()
                    question.rows.keep(row)
        except BaseException:
            # Ctrl-C or a failed write: the questions in flight are cancelled (their rows are not written, a rerun
            # asks them again), the queued ones dropped
            for ref in inflight:
                try:
                    ray.cancel(ref)  # a queued one is dropped; a running one finishes in a worker :meth:`close` ends
                except Exception:  # noqa: BLE001 - cancelling is best effort on the way out
                    pass
            raise


def _cause(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[-1] if text else ''}"


#: variables a worker on another node needs from the driver's environment (beside ``HQA_*``): the LM's credentials
#: (``lm.api_key_env``'s default) and the offline switches hqa's tests and mirrors rely on
_FORWARDED_ENV = ("OPENAI_API_KEY", "LITELLM_LOCAL_MODEL_COST_MAP", "HF_HUB_OFFLINE", "MLFLOW_TRACKING_URI")


__all__ = ["Desk", "RayEngine", "Worker", "example_data", "example_of"]

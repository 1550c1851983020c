"""The study job (``hqa study FILE``, issue 54): a study file's cells (:mod:`hqa.schemas.study`: program × compile
arm × dataset × LM × seed) answered as one job — one MLflow parent run with a child run and a run folder per cell,
``threads`` questions in flight *across* cells on one :class:`~hqa.jobs.engine.ThreadsEngine` (questions are queued
cell by cell in turn, so no cell waits for another's tail), one budget for the whole study, resumable after an
interrupt (each cell folder resumes as ``hqa evaluate``'s does), and a failing cell (an LM that answers every
question with an error, a dataset that cannot be loaded) reported in one line while the others finish.

``dry_run`` prints every cell, the ``hqa evaluate`` / ``hqa compile`` command that runs it alone, and its estimate:
per-question LM calls, tokens and seconds measured on the rows the cell's folder already holds, else on a probe of
``probe`` questions per cell (their rows are kept: the run asks them no more), priced at the cell LM's price.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hqa.config import Settings
from hqa.errors import ConfigError, HQAError
from hqa.jobs.budget import Budget, BudgetReached, Price, price_for, profile
from hqa.jobs.engine import ProgramSpec, Question, engine_in, progress_bar, sources_key
from hqa.jobs.evaluate import open_run
from hqa.jobs.heap import settled
from hqa.schemas.run_folder import RunFolder, lock_folder
from hqa.schemas.study import Cell, LMSpec, Study, cell_kwargs_json

__all__ = ["CellRun", "StudyResult", "cell_command", "cell_price", "cell_settings", "run_study"]

#: a cell whose first questions all failed (an LM answering 500, a server gone) is dropped after this many
FAIL_AFTER = 3


def cell_settings(settings: Settings, cell: Cell) -> Settings:
    """The study's settings with the cell's LM (provider, model, base URL, sampling, seed; its price as
    ``lm.price_in`` / ``lm.price_out`` where the settings have those keys) — validated as any settings are."""
    data = settings.as_dict()
    lm = {**data["lm"], **{k.removeprefix("lm_"): v for k, v in cell.lm.settings_overrides().items()},
          "seed": cell.seed}
    for key, value in (("price_in", cell.lm.price_in), ("price_out", cell.lm.price_out)):
        if value is not None and key in data["lm"]:  # settings that price an LM themselves (hqa.config.LMConfig)
            lm[key] = value
    if cell.lm.provider == "local" and settings.lm.provider != "local":
        lm["model"] = ""  # the packaged SmolLM2, not the remote model's name
    try:
        return Settings(**{**data, "lm": lm})
    except Exception as exc:  # noqa: BLE001 - pydantic's message, on one line
        raise ConfigError(f"lm {cell.lm.name!r}: {str(exc).splitlines()[-1].strip()}") from None


def cell_price(cell: Cell, settings: Settings) -> Price | None:
    """The price of the cell's LM: the study file's ``price_in`` / ``price_out`` (``price_cached``, else the prompt
    price), else the settings' (:func:`hqa.jobs.budget.price_for`: the embedded model 0, hqa/data/prices.json)."""
    lm = cell.lm
    if lm.price_in is not None:
        return Price(model=lm.model or lm.name, prompt=lm.price_in,
                     cached_prompt=lm.price_in if lm.price_cached is None else lm.price_cached,
                     completion=lm.price_out, source="the study file")
    return price_for(settings.lm)


def cell_command(cell: Cell, study_file: str | None = None) -> str:
    """The commands that run ``cell`` alone: ``hqa evaluate`` (uncompiled), or ``hqa compile`` then ``hqa evaluate
    --load`` (a compile arm)."""
    lm = cell.lm
    env = f"HQA_LM__SEED={cell.seed} " if cell.seed else ""
    if lm.temperature is not None:
        env += f"HQA_LM__TEMPERATURE={lm.temperature:g} "
    if lm.max_tokens is not None:
        env += f"HQA_LM__MAX_TOKENS={lm.max_tokens} "
    lm_args = [] if lm.provider == "local" else ["--lm", lm.provider, "--model", lm.model]
    if lm.api_base:
        lm_args += ["--api-base", lm.api_base]
    data = ["--dataset", cell.dataset] + (["--limit", str(cell.limit)] if cell.limit else [])
    kwargs = ["--program-kwargs", cell_kwargs_json(cell.program.kwargs)] if cell.program.kwargs else []
    if not cell.compiled:
        return env + shlex.join(["hqa", "evaluate", "--program", cell.program.name, *kwargs, *data, *lm_args])
    optimizer, _, k = cell.arm.partition("@")
    name = f"study-{cell.id}"
    compile_args = ["hqa", "compile", "--program", cell.program.name, *kwargs, "--optimizer", optimizer,
                    *(["--k", k] if k else []), "--train", cell.program.train, "--train-limit",
                    str(cell.program.train_limit), "--dev", cell.dataset, "--exclude", "eval", "--no-eval",
                    "--seed", str(cell.seed), "--name", name, "--force", *lm_args]
    return (env + shlex.join(compile_args) + " && " + env
            + shlex.join(["hqa", "evaluate", "--load", f"artifacts/programs/{name}", *data, *lm_args]))


def cell_fingerprint(cell: Cell, settings: Settings) -> str:
    """What makes two runs of a cell the same configuration: program, kwargs, arm, data, the LM settings and the
    sources (kg, text, linker, models), hashed."""
    payload = {"program": cell.program.name, "kwargs": cell.program.kwargs, "arm": cell.arm, "dataset": cell.dataset,
               "limit": cell.limit, "train": cell.program.train if cell.compiled else None,
               "settings": {k: v for k, v in settings.as_dict().items() if k in ("lm", "kg", "text", "linker",
                                                                                 "models", "world")}}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:12]


@dataclass
class CellRun:
    """One cell while the study runs: its settings, folder, price, the opened program and LM, its questions' rows,
    and why it failed (None while it has not)."""

    cell: Cell
    settings: Settings
    folder: Path
    price: Price | None
    command: str
    fingerprint: str
    run: Any = None  # hqa.jobs.evaluate.OpenRun
    program: Any = None
    lm: Any = None
    adapter: Any = None
    opened: Any = None
    examples: list = field(default_factory=list)
    failed: str | None = None
    child_run_id: str | None = None
    finished: int = 0
    errors: int = 0
    compiled_info: dict | None = None  # a compile arm's optimizer info (its wrapper), for saving it
    spec: ProgramSpec | None = None  # how a worker process opens the cell's program (an engine beyond this one)

    @property
    def tag(self) -> dict:
        c = self.cell
        return {"program": c.program.name, "dataset": c.dataset, "program_kwargs": c.program.kwargs, "arm": c.arm,
                "lm": f"{c.lm.provider}:{c.lm.model or 'SmolLM2-135M'}", "seed": c.seed}

    def seen(self, row: dict) -> None:
        """A finished row: after the first :data:`FAIL_AFTER` questions all failed, the cell is failed (its queued
        questions are not asked)."""
        self.finished += 1
        self.errors += bool(row.get("error"))
        if self.failed is None and self.errors == self.finished >= min(FAIL_AFTER, len(self.run.todo)):
            self.failed = str(row.get("error"))
            _say(f"cell {self.cell.id} failed: {self.failed}; its other questions are not asked, the other cells go "
                 "on (a rerun asks it again)")

    def questions(self, examples: list) -> list[Question]:
        return [Question(self.program, ex, self.run.rows, lm=self.lm, adapter=self.adapter,
                         skip=lambda: self.failed is not None, price=self.price, spec=self.spec) for ex in examples]

    def ship(self, dry_run: bool) -> None:
        """:attr:`spec`: the cell's program as a worker opens it — built from the cell's program, kwargs and dataset
        (the uncompiled student in a dry run), or, for a compiled arm, the compiled program saved into the cell's
        folder (:attr:`hqa.schemas.run_folder.RunFolder.program_dir`) and loaded from there; DSPy's LM cache off, as
        here (:meth:`_Parts.lm`)."""
        c = self.cell
        if c.compiled and not dry_run and self.program is not None:
            from hqa.artifacts.store import save_artifact

            folder = save_artifact(self.program, RunFolder(self.folder).program_dir,
                                   {"program": c.program.name, "program_kwargs": c.program.kwargs,
                                    "wrapper": (self.compiled_info or {}).get("wrapper"), "optimizer": c.arm})
            self.spec = ProgramSpec.of(self.settings, load=folder, lm_cache=False)
            return
        self.spec = ProgramSpec.of(self.settings, program=c.program.name, program_kwargs=c.program.kwargs,
                                   benchmark=c.dataset, lm_cache=False, student=c.compiled)


@dataclass
class StudyResult:
    """What :func:`run_study` did: its folder, the cells, the MLflow parent run, the results table's files, and the
    cells that failed (cell id → why)."""

    folder: Path
    cells: list[CellRun]
    run_id: str | None
    table: dict[str, Path] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    estimate: list[dict] = field(default_factory=list)
    seconds: float = 0.0


def _say(text: str) -> None:
    from tqdm import tqdm

    tqdm.write(f"hqa: {text}", file=sys.stderr)


def study_folder(settings: Settings, study: Study, out: Path | None) -> Path:
    return Path(out) if out else settings.artifacts_dir / "studies" / study.study.name


class _Parts:
    """What cells share: a toolbox per sources configuration and a DSPy LM per LM configuration, built once."""

    def __init__(self):
        self.toolboxes: dict[str, Any] = {}
        self.lms: dict[str, Any] = {}
        self.checked: set[str] = set()

    def toolbox(self, settings: Settings, program: str):
        from hqa.programs import canonical, program_class

        if not program_class(canonical(program)).needs_toolbox:
            return None
        key = sources_key(settings)
        if key not in self.toolboxes:
            from hqa.toolbox import Toolbox

            toolbox = Toolbox(settings)
            toolbox.check()
            self.toolboxes[key] = toolbox
        return self.toolboxes[key]

    def lm(self, settings: Settings):
        from hqa.lm.models import build_lm, check_server

        key = json.dumps(settings.as_dict()["lm"], sort_keys=True, default=str)
        if settings.lm.provider == "openai_compatible" and settings.lm.api_base not in self.checked:
            check_server(settings.lm.api_base)  # a server that is not there fails its cells at once, in one line
            self.checked.add(settings.lm.api_base)
        if key not in self.lms:
            from hqa.lm.adapters import adapter_for

            # DSPy's LM cache off: a cell's tokens, cost and time per question are its own, not another cell's
            # (two cells asking the same prompt) or a dry run's (issue 53); a resumed study resumes from its rows
            lm = build_lm(settings).copy(cache=False)
            if hasattr(getattr(lm, "engine", None), "response_format_in_use"):  # probed now: failing it fails the cell
                lm.engine.response_format_in_use()
            self.lms[key] = (lm, adapter_for(settings.lm))
        return self.lms[key]


def _open_cell(cr: CellRun, parts: _Parts, fresh: bool, stack, dry_run: bool = False) -> None:
    """Load the cell's questions, open its program (compiled for a compile arm, except in a dry run: the uncompiled
    student is measured) and LM, and open its run folder (locked, resumed unless ``fresh``); an error here fails the
    cell (:attr:`CellRun.failed`), not the study."""
    from hqa.app import open_program
    from hqa.data.datasets import load_examples

    c = cr.cell
    try:
        cr.examples = load_examples(c.dataset, c.limit)
        if not cr.examples:
            raise HQAError(f"dataset {c.dataset} gave no questions")
        cr.lm, cr.adapter = parts.lm(cr.settings)
        toolbox = parts.toolbox(cr.settings, c.program.name)
        cr.opened = open_program(cr.settings, c.program.name, program_kwargs=c.program.kwargs, configure=False,
                                 check_lm=False, toolbox=toolbox, benchmark=c.dataset, student=c.compiled)
        cr.program = _compiled(cr) if c.compiled and not dry_run else cr.opened.program
        if toolbox is not None:
            from hqa.app import warm_up

            warm_up(cr.settings, cr.opened)  # its indexes load now, not inside the first question's seconds
        cr.run = stack.enter_context(open_run(cr.examples, RunFolder(cr.folder).rows_path, cr.tag, not fresh,
                                              on_row=cr.seen))
    except (HQAError, OSError, ValueError) as exc:
        cr.failed = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        _say(f"cell {c.id} failed: {cr.failed}; the other cells go on")


def _compiled(cr: CellRun):
    """A compile arm's program: the cell's optimizer (``optimizer@k``) over its program's train set, with every
    evaluation set's questions kept out of the demos (``--exclude eval``), under the cell's LM."""
    import dspy

    from hqa.data.datasets import load_examples
    from hqa.jobs.compare import arm_options
    from hqa.optimize.compile import CompileOptions, compile_program

    c = cr.cell
    base = CompileOptions(program=c.program.name, optimizer="none", train=c.program.train,
                          train_limit=c.program.train_limit, dev=c.dataset, dev_limit=c.limit or 20, seed=c.seed,
                          program_kwargs=c.program.kwargs, exclude=("eval",))
    opts = arm_options(base, c.arm).validate()
    train = load_examples(opts.train, opts.train_limit)
    with dspy.context(lm=cr.lm, adapter=cr.adapter):
        program, info = compile_program(opts, train, cr.examples, cr.opened.toolbox, student=cr.opened.program)
    cr.compiled_info = info
    return program


def _interleave(cells: list[CellRun], take: Callable[[CellRun], list]) -> list[Question]:
    """Every cell's questions, one of each cell in turn: all cells advance together."""
    lists = [cr.questions(take(cr)) for cr in cells if cr.run is not None and cr.failed is None]
    return [q for group in itertools.zip_longest(*lists) for q in group if q is not None]


class _Tracking:
    """The study's MLflow runs: the parent (resumed by id on a rerun) and a child per cell, written from this
    thread through an MlflowClient (the cells' questions run on other threads)."""

    def __init__(self, settings: Settings, folder: Path, study: Study, path: str | None):
        from hqa.tracking import runs as tracing

        self.mlflow = tracing.setup(settings, autolog=False)
        self.client = self.mlflow.tracking.MlflowClient()
        self.state_file = folder / "study.json"
        self.state = _read_json(self.state_file)
        parent = self.state.get("parent_run_id")
        if parent and not self._exists(parent):
            parent, self.state["children"] = None, {}
        self.active = self.mlflow.start_run(run_id=parent, run_name=None if parent else f"study:{study.study.name}",
                                            tags=None if parent else {"job": "study"})
        self.parent = self.active.info.run_id
        if not parent:
            self.mlflow.log_params({"job": "study", "study": study.study.name, "file": path or "",
                                    "threads": study.study.threads})
        self.state["parent_run_id"] = self.parent
        self.state.setdefault("children", {})

    def _exists(self, run_id: str) -> bool:
        try:
            self.client.get_run(run_id)
            return True
        except Exception:  # noqa: BLE001 - another store, or deleted
            return False

    def child(self, cr: CellRun) -> None:
        run_id = self.state["children"].get(cr.cell.id)
        if not run_id or not self._exists(run_id):
            exp = self.active.info.experiment_id
            run = self.client.create_run(exp, run_name=cr.cell.id, tags={"mlflow.parentRunId": self.parent,
                                                                         "job": "study-cell"})
            run_id = run.info.run_id
            c = cr.cell
            for key, value in {"program": c.program.name, "program_kwargs": cell_kwargs_json(c.program.kwargs),
                               "arm": c.arm, "dataset": c.dataset, "limit": c.limit, "lm": cr.tag["lm"],
                               "seed": c.seed, "out": str(cr.folder), "fingerprint": cr.fingerprint}.items():
                self.client.log_param(run_id, key, str(value)[:500])
            self.state["children"][c.id] = run_id
        else:
            self.client.update_run(run_id, status="RUNNING")
        cr.child_run_id = run_id
        self.save()

    def finish(self, cr: CellRun, status: str) -> None:
        from hqa.tracking.record import record_tags, run_record

        if not cr.child_run_id:
            return
        run_id = cr.child_run_id
        if cr.run is not None and cr.run.all_rows():
            summary = cr.run.summary()
            for k, v in {**{f"eval_{k}": v for k, v in summary.metrics.items()},
                         **{f"eval_{k}_per_q": v for k, v in summary.cost.items()},
                         "eval_errors": summary.errors, "eval_n": summary.n}.items():
                self.client.log_metric(run_id, k, float(v))
            for path in RunFolder(cr.folder).report_files():
                if path.exists():
                    self.client.log_artifact(run_id, str(path), artifact_path="evaluation")
        if cr.opened is not None:
            record = run_record(cr.settings, program=cr.program, toolbox=cr.opened.toolbox,
                                datasets={"eval": (cr.cell.dataset, cr.examples)})
            self.client.log_dict(run_id, record, "record.json")
            for key, value in record_tags(record).items():
                self.client.set_tag(run_id, key, value)
        if cr.failed:
            self.client.set_tag(run_id, "hqa.failed", cr.failed[:500])
        self.client.set_terminated(run_id, status=status)

    def save(self) -> None:
        from hqa.io.files import write_atomic

        write_atomic(self.state_file, json.dumps(self.state, indent=1, sort_keys=True) + "\n")

    def close(self, status: str = "FINISHED") -> None:
        self.save()
        self.mlflow.end_run(status=status)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_info(cr: CellRun, study: str | None, tracking_uri: str) -> None:
    from hqa.jobs.run_info import price_record, world_of, write_run_info

    c = cr.cell
    write_run_info(cr.folder, study=study, cell=c.id, program=c.program.name, label=c.program.row_label,
                   program_kwargs=c.program.kwargs, arm=c.arm, dataset=c.dataset, limit=c.limit, seed=c.seed,
                   lm={"name": c.lm.name, "provider": c.lm.provider, "model": c.lm.model or "SmolLM2-135M",
                       "api_base": c.lm.api_base or None},
                   price=price_record(cr.price), world=world_of(cr.settings, getattr(cr.opened, "toolbox", None))
                   if cr.opened is not None else "?", fingerprint=cr.fingerprint, command=cr.command,
                   mlflow_run_id=cr.child_run_id, tracking_uri=tracking_uri)


def plan(settings: Settings, study: Study, *, out: Path | None = None, limit: int | None = None,
         lms: list[LMSpec] | None = None, path: str | None = None) -> list[CellRun]:
    """The study's cells with their settings, folders, prices, commands and fingerprints (nothing opened)."""
    folder = study_folder(settings, study, out)
    runs = []
    for cell in study.cells(limit=limit, lms=lms):
        s = cell_settings(settings, cell)
        runs.append(CellRun(cell=cell, settings=s, folder=folder / cell.id, price=cell_price(cell, s),
                            command=cell_command(cell, path), fingerprint=cell_fingerprint(cell, s)))
    return runs


def run_study(settings: Settings, study: Study, *, path: str | None = None, out: Path | None = None,
              limit: int | None = None, lms: list[LMSpec] | None = None, threads: int | None = None,
              budget: Budget | None = None, dry_run: bool = False, probe: int = 1, fresh: bool = False,
              progress: bool = True, price_as: Price | None = None, engine: Any = "threads",
              workers: int | None = None, ray_address: str | None = None) -> StudyResult:
    """Run (or with ``dry_run`` estimate) the study: see the module docstring.  ``budget`` (else the study file's
    ``max_lm_calls`` / ``max_cost``) covers every cell; when it is reached the rows so far are kept, the table of
    what finished is written and :class:`BudgetReached` names it.  ``price_as``: price every cell's estimate at this
    price instead (a dry run measured with the embedded model, priced as a hosted one).  ``engine``, ``workers``,
    ``ray_address``: :func:`hqa.jobs.engine.make_engine` (``threads`` questions in flight across all cells either
    way), or ``engine`` an engine already made (:func:`hqa.jobs.engine.engine_in`)."""
    import dspy

    started = time.monotonic()
    cells = plan(settings, study, out=out, limit=limit, lms=lms, path=path)
    folder = study_folder(settings, study, out)
    threads = threads or study.study.threads
    budget = budget or study_budget(study.study.max_lm_calls, study.study.max_cost, cells)
    folder.mkdir(parents=True, exist_ok=True)
    dspy.configure_cache(disk_cache_dir=str(settings.artifacts_dir / "cache" / "dspy"))
    from hqa.io.logs import quiet_libraries

    quiet_libraries()
    parts = _Parts()
    result = StudyResult(folder=folder, cells=cells, run_id=None)
    with contextlib.ExitStack() as stack:
        stack.enter_context(_locked(folder))
        for cr in cells:
            _open_cell(cr, parts, fresh, stack, dry_run)
        runner = engine_in(stack, engine, threads=threads, workers=workers, address=ray_address)
        if runner.remote:
            for cr in cells:
                if cr.run is not None and cr.failed is None:
                    cr.ship(dry_run)
        if dry_run:
            result.estimate = _dry_run(cells, runner, probe, budget, price_as)
            result.failed = {cr.cell.id: cr.failed for cr in cells if cr.failed}
            result.seconds = time.monotonic() - started
            return result
        tracking = _Tracking(settings, folder, study, path)
        result.run_id = tracking.parent
        for cr in cells:
            tracking.child(cr)
            _write_info(cr, study.study.name, settings.tracking_uri)
        status, stop = "FINISHED", None
        total = sum(len(cr.examples) for cr in cells if cr.run is not None)
        done = sum(len(cr.run.done) for cr in cells if cr.run is not None)
        try:
            with settled(), progress_bar(total, done, desc="study", enabled=progress) as bar:
                for cr in cells:
                    if cr.run is not None:
                        cr.run.rows.bar = bar
                if budget is not None and budget.reached():
                    raise BudgetReached(f"{budget.reached()} before the study began")
                runner.run(_interleave(cells, lambda cr: cr.run.todo), budget)
            reason = budget.reached() if budget is not None else None
            if reason and any(cr.run is not None and cr.failed is None and len(cr.run.all_rows()) < len(cr.examples)
                              for cr in cells):
                stop = BudgetReached(f"{reason} ({budget.lm_calls} LM calls); the rows so far are kept in each cell's "
                                     f"folder under {folder}: the same command resumes")
        except KeyboardInterrupt:
            for cr in cells:
                tracking.finish(cr, "KILLED")
            tracking.close("KILLED")
            raise
        result.failed = {cr.cell.id: cr.failed for cr in cells if cr.failed}
        result.table = _finish(cells, tracking, folder, study, stop)
        tracking.close("FAILED" if stop else "FINISHED")
    result.seconds = time.monotonic() - started
    if stop:
        raise stop
    return result


def _finish(cells: list[CellRun], tracking: _Tracking, folder: Path, study: Study, stop) -> dict[str, Path]:
    """Each cell's report and child run closed, then the study's results table written and logged to the parent."""
    from hqa.reports.results import results_table, write_results
    from hqa.reports.summary import write_report

    for cr in cells:
        complete = cr.run is not None and len(cr.run.all_rows()) == len(cr.examples)
        if cr.run is not None and cr.run.all_rows():
            write_report(cr.folder, title=f"{cr.cell.id} ({study.study.name})")
        tracking.finish(cr, "FAILED" if cr.failed else ("FINISHED" if complete else "KILLED"))
    run_dirs = [cr.folder for cr in cells if RunFolder(cr.folder).rows_path.exists()
                and RunFolder(cr.folder).rows()]
    if not run_dirs:
        return {}
    table = results_table(run_dirs, baseline=study.study.baseline or None)
    files = write_results(table, folder / "results", title=f"study {study.study.name}" + (" (stopped)" if stop else ""))
    for path in files.values():
        tracking.mlflow.log_artifact(str(path), artifact_path="results")
    return files


@contextlib.contextmanager
def _locked(folder: Path):
    """The study folder locked for this run (a second ``hqa study`` on it refuses at once)."""
    held = lock_folder(folder)
    try:
        yield
    finally:
        held.close()


#: the budget's own price for its messages; each cell's row is charged at that cell's price
_EACH = Price(model="each cell's LM", prompt=0.0, cached_prompt=0.0, completion=0.0)


def study_budget(max_lm_calls: int | None, max_cost: float | None, cells: list[CellRun]) -> Budget | None:
    """The command line's budget over the study's cells (each charged at its LM's price)."""
    if max_lm_calls is None and max_cost is None:
        return None
    if max_cost is not None:
        unpriced = sorted({cr.cell.lm.name for cr in cells if cr.price is None})
        if unpriced:
            raise ConfigError(f"--max-cost needs every LM's price: give price_in / price_out for "
                              f"{', '.join(unpriced)} in the study file")
    return Budget(max_lm_calls=max_lm_calls, max_cost=max_cost, price=_EACH)


def _dry_run(cells: list[CellRun], engine, probe: int, budget: Budget | None,
             price_as: Price | None) -> list[dict]:
    """Each cell's estimate: the per-question profile of its earlier rows, else of ``probe`` questions asked now
    (all cells' probes at once, their rows kept), times the questions left; priced at ``price_as`` or the cell's."""
    asked = []
    for cr in cells:
        if cr.run is not None and cr.failed is None and profile(cr.run.done.values()) is None and probe > 0:
            asked.append(cr)
    threads = engine.threads
    with settled():
        engine.run(_interleave(asked, lambda cr: cr.run.todo[:probe]), budget)
    lines = []
    for cr in cells:
        line = {"cell": cr.cell.id, "command": cr.command, "n": len(cr.examples), "failed": cr.failed}
        if cr.run is not None and cr.failed is None:
            earlier, new = list(cr.run.done.values()), list(cr.run.rows.rows.values())
            prof = profile(earlier) or profile(new)
            line["source"] = (f"{len(earlier)} earlier rows" if profile(earlier) else
                              f"probe of {len(new)} question{'s' if len(new) != 1 else ''}, kept" if new else "none")
            if cr.cell.compiled and not profile(earlier):
                line["source"] += " (the uncompiled program: a compile arm's demos make its prompts longer, and its "
                line["source"] += "compile's own LM calls are not counted)"
            left = len(cr.run.todo) - len(new)
            line["left"] = left
            price = price_as or cr.price
            line["price"] = None if price is None else price.model
            if prof is not None:
                line.update(per_q={k: round(prof[k], 1) for k in ("lm_calls", "prompt_tokens",
                                                                  "cached_prompt_tokens", "completion_tokens",
                                                                  "seconds")},
                            lm_calls=prof["lm_calls"] * left, prompt_tokens=prof["prompt_tokens"] * left,
                            completion_tokens=prof["completion_tokens"] * left,
                            cost=None if price is None else left * price.dollars(
                                prof["prompt_tokens"], prof["cached_prompt_tokens"], prof["completion_tokens"]),
                            seconds=prof["seconds"] * left)
            elif new:
                line["failed"] = f"every probe question failed: {new[0].get('error')}"
        lines.append(line)
    total = {k: sum(line.get(k) or 0 for line in lines) for k in ("lm_calls", "prompt_tokens", "completion_tokens",
                                                                   "cost", "seconds", "left")}
    total["wall"] = total["seconds"] / max(1, threads)
    total["threads"] = threads
    lines.append({"total": total})
    return lines

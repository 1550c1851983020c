"""The compare job: every arm (an optimizer, ``optimizer@k``, or an optimizer crossed with ``--vary``'s
program-kwargs) compiled and evaluated on the same dev set, one nested MLflow run per arm, resumable; and the
multi-benchmark compare.  Each arm's student comes through the compile job's :func:`hqa.jobs.compile.prepare`.
"""

from __future__ import annotations

import glob
import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from hqa.config import Settings
from hqa.errors import ConfigError
from hqa.jobs.budget import Budget, BudgetReached
from hqa.jobs.compile import announce_estimate, budget_guard, prepare
from hqa.optimize.compile import CompileOptions, compile_program, data_hash
from hqa.schemas.run_folder import CompareFolder

#: HumanIQ RQ5 / Figure 6 (and RQ8's 0 / 1 / 3 examples): zero-shot (no solution process in the prompt; the merge
#: keeps its few-shots), random and adaptive (DPP) selection with 1 and 3 processes, relevance only and diversity
#: only with 3.  ``optimizer@k`` sets the number of processes for that arm.
RQ5_ARMS = ("dpp-human@0", "random-human@1", "random-human@3", "dpp-human@1", "dpp-human@3", "relevance-human@3",
            "diversity-human@3")
#: ``hqa compare``'s default: the RQ5 arms, then automatic few-shots (the project's human-vs-automatic question)
COMPARE_ARMS = RQ5_ARMS + ("bootstrap", "mipro", "human+bootstrap")


def arm_options(base: CompileOptions, arm: str) -> CompileOptions:
    """The options of one compare arm: ``optimizer`` or ``optimizer@k`` (k human processes for that arm)."""
    optimizer, sep, k = arm.partition("@")
    if not sep:
        return replace(base, optimizer=arm)
    if not k.isdigit():
        raise ConfigError(f"compare arm {arm!r}: the part after '@' must be a number of demos (e.g. dpp-human@3)")
    return replace(base, optimizer=optimizer, k=int(k))


def parse_vary(text: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    """``--vary 'KEY=V1;V2;…'`` → ``((V1, {KEY: V1}), …)``: one program-kwargs arm per value (a value that reads
    as JSON is typed, e.g. ``min_masks=1;2``; anything else is a string, e.g. ``sources=kg,text,model;model``)."""
    key, sep, values = (text or "").partition("=")
    key = key.strip()
    items = [v.strip() for v in values.split(";") if v.strip()]
    if not sep or not key.isidentifier() or not items:
        raise ConfigError(f"--vary must read KEY=VALUE1;VALUE2;... (e.g. sources=kg,text,model;model), got {text!r}")

    def typed(v: str) -> Any:
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            return v

    return tuple((v, {key: typed(v)}) for v in items)


def _arms_finished(n: int) -> str:
    """"the 2 arms that finished are" / "the arm that finished is", for the stop messages."""
    return "the arm that finished is" if n == 1 else f"the {n} arms that finished are"


def compare(settings: Settings, base: CompileOptions, arms: tuple[str, ...] = COMPARE_ARMS,
            out_dir: Path | None = None, progress: bool = False,
            variants: tuple[tuple[str, dict[str, Any]], ...] = (), configure: bool | None = None,
            budget: Budget | None = None, estimate=None, fresh: bool = False, engine: Any = "threads",
            workers: int | None = None, ray_address: str | None = None) -> dict[str, Any]:
    """Every arm compiled and evaluated on the same dev set; a table (md + csv) and a bar plot with 95% CIs.
    ``budget`` covers every arm: when it is reached, the table of the arms that finished is written and
    BudgetReached names it.  ``variants`` (:func:`parse_vary`) crosses the optimizer arms with program-kwargs arms
    (e.g. SS-CoT Table 3's source orders); a row's ``arm`` is then ``VALUE`` (one optimizer) or ``OPTIMIZER:VALUE``.

    Resumable: each finished arm's row is kept in ``arms.json`` with a key of the arguments (:func:`_compare_key`);
    the same command after a budget stop or Ctrl-C (``out_dir`` the stopped one's, or None: the newest stopped one)
    reuses those rows and runs the other arms; ``fresh`` starts a new compare instead.

    ``engine`` (a name, with ``workers`` and ``ray_address``: :func:`hqa.jobs.engine.make_engine`; or an engine
    already made) answers every arm's dev questions; each arm is compiled here, and on an engine beyond this process
    its compiled program is saved beside its rows (:meth:`hqa.schemas.run_folder.CompareFolder.arm_program`) for the
    workers to load."""
    import contextlib

    from hqa.jobs.engine import engine_in

    with contextlib.ExitStack() as stack:
        engine = engine_in(stack, engine, threads=base.threads, workers=workers, address=ray_address)
        return _compare(settings, base, arms, out_dir, progress, variants, configure, budget, estimate, fresh, engine)


def _compare(settings: Settings, base: CompileOptions, arms, out_dir, progress, variants, configure, budget,
             estimate, fresh, engine) -> dict[str, Any]:
    import mlflow

    from hqa.reports.compare import write_compare_outputs
    from hqa.tracking import registry as tracking
    from hqa.tracking.record import log_record, run_record

    train, dev, opened = prepare(settings, base, configure)
    grid = [(arm, arm, {}) for arm in arms] if not variants else [
        (opt, value if len(arms) == 1 else f"{opt}:{value}", kw) for opt in arms for value, kw in variants]
    key = _compare_key(settings, base, arms, variants, train, dev)
    out_dir, finished = _resume(settings, base.program, key, out_dir, fresh, len(grid))
    todo = [g for g in grid if g[1] not in finished]
    if estimate is not None and todo:  # the optimizer of every arm still to run, crossed with --vary's values
        announce_estimate(estimate, base, [arm_options(base, opt).optimizer for opt, _a, _kw in todo], train, dev,
                          opened.program, budget)
    out_dir.mkdir(parents=True, exist_ok=True)
    arm_runner = _Arms(settings, base, opened, train, dev, out_dir, progress, budget, engine)
    rows: list[dict[str, Any]] = []
    with tracking.run(settings, f"compare:{base.program}", params={"job": "compare", "arms": ",".join(arms),
                                                                    **asdict(base)}, tags={"job": "compare"}) as parent:
        log_record(run_record(settings, toolbox=opened.toolbox, seeds={"compile": base.seed},
                              datasets={"train": (base.train, train), "dev": (base.dev, dev)}))
        try:
            for optimizer_name, arm, kwargs in grid:
                if arm in finished:  # a stopped compare's arm, run with the same arguments: its row is reused
                    rows.append(finished[arm])
                    continue
                rows.append(arm_runner.run(optimizer_name, arm, kwargs))
                _write_state(out_dir, key, rows, complete=False)
        except (BudgetReached, KeyboardInterrupt) as exc:
            _stopped(exc, rows, base, out_dir)
        _write_state(out_dir, key, rows, complete=True)
        table_md, table_csv, plot = write_compare_outputs(rows, base.metric, out_dir,
                                                          title=f"{base.program} on {base.dev}")
        for path in (table_md, table_csv, plot):
            mlflow.log_artifact(str(path), artifact_path="compare")
    return {"rows": rows, "table": str(table_md), "csv": str(table_csv), "plot": str(plot), "run_id": parent.info.run_id}


@dataclass
class _Arms:
    """What the arms of one compare share: the options, the opened program and its data, the output folder, the
    budget, and the students of the ``--vary`` values opened so far (by arguments)."""

    settings: Settings
    base: CompileOptions
    opened: Any
    train: list
    dev: list
    out_dir: Path
    progress: bool
    budget: Budget | None
    engine: Any = None  # hqa.jobs.engine's Engine the arms' dev questions are answered on
    students: dict[str, Any] = field(default_factory=dict)

    def student(self, kwargs: dict[str, Any]):
        """A copy of the uncompiled program an arm compiles: the opened one, or — for a ``--vary`` value — the
        program opened with that value's arguments and the same toolbox, once per value."""
        key = json.dumps(kwargs, sort_keys=True, default=str)
        if key not in self.students:
            from hqa.app import open_program

            self.students[key] = self.opened.program if not kwargs else open_program(
                self.settings, self.base.program, program_kwargs={**self.base.program_kwargs, **kwargs},
                configure=False, check_lm=False, toolbox=self.opened.toolbox, student=True).program
        return self.students[key].deepcopy()

    def _ship(self, program, info: dict, opts: CompileOptions, arm: str):
        """The arm's compiled program saved for workers in other processes, and the recipe that loads it."""
        from hqa.artifacts.store import save_artifact
        from hqa.jobs.engine import ProgramSpec

        folder = save_artifact(program, CompareFolder(self.out_dir).arm_program(arm),
                               {"program": opts.program, "program_kwargs": opts.program_kwargs,
                                "wrapper": info.get("wrapper"), "optimizer": opts.optimizer})
        return ProgramSpec.of(self.settings, load=folder)

    def run(self, optimizer_name: str, arm: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """One arm compiled and evaluated on the dev set in its nested MLflow run; its row of the table."""
        from hqa.jobs.evaluate import evaluate
        from hqa.scoring.stats import paired_bootstrap
        from hqa.tracking import registry as tracking

        base = self.base
        opts = arm_options(base, optimizer_name)
        opts = replace(opts, program_kwargs={**opts.program_kwargs, **kwargs})
        with tracking.run(self.settings, f"{base.program}:{arm}", params={"arm": arm}, nested=True) as child:
            start = time.monotonic()
            student = self.student(kwargs)
            with budget_guard(self.budget, f"compiling arm {arm}", "the arms before it are kept"):
                program, info = compile_program(opts, self.train, self.dev, self.opened.toolbox, student=student)
            compile_s = time.monotonic() - start
            spec = self._ship(program, info, opts, arm) if self.engine is not None and self.engine.remote else None
            # DSPy's LM cache off for the measured questions: an arm's tokens, cost and time are its own, not those
            # of the estimate's dry run or an earlier arm that asked the same prompts (issue 53)
            summary = evaluate(program, self.dev, threads=base.threads, out=CompareFolder(self.out_dir).arm_rows(arm),
                               resume=False, progress=self.progress, budget=self.budget, lm_cache=False,
                               engine=self.engine, spec=spec)
            tracking.log_summary(summary, "dev")
            lo, hi = paired_bootstrap([r["scores"][base.metric] for r in summary.rows], seed=base.seed)
            return {"arm": arm, "n": summary.n, **summary.metrics, "ci_low": lo, "ci_high": hi,
                    **{f"{k}_per_q": v for k, v in summary.cost.items()}, "errors": summary.errors,
                    "compile_s": round(compile_s, 1), "run_id": child.info.run_id}


def _resume(settings: Settings, program: str, key: str, out_dir: Path | None, fresh: bool,
            n_arms: int) -> tuple[Path, dict[str, dict]]:
    """The compare's folder and the rows of its finished arms by name: an earlier compare's with these arguments
    (:func:`_stopped_compare`), said in one line, unless ``fresh``; else ``out_dir`` or a new folder, none finished."""
    resumed = None if fresh else _stopped_compare(settings, program, key, out_dir)
    if resumed is None:
        return Path(out_dir or _new_folder(settings, program)), {}
    finished = {r["arm"]: r for r in (_read_state(resumed) or {}).get("arms", [])}
    print(f"hqa: compare resumes {resumed}: {len(finished)} finished arm{'s' if len(finished) != 1 else ''} "
          f"reused ({', '.join(finished)}), {n_arms - len(finished)} to run", file=sys.stderr)
    return Path(resumed), finished


def _stopped(exc: BaseException, rows: list[dict], base: CompileOptions, out_dir: Path) -> None:
    """A compare stopped by its budget or Ctrl-C (``exc``, being handled): the table of the arms that finished is
    written and the stop raised again, naming it (unchanged when no arm finished)."""
    if not rows:
        raise
    from hqa.reports.compare import write_compare_outputs

    table_md, _csv, _plot = write_compare_outputs(rows, base.metric, out_dir,
                                                  title=f"{base.program} on {base.dev} (stopped)")
    if isinstance(exc, KeyboardInterrupt):
        print(f"hqa: compare interrupted; {_arms_finished(len(rows))} in {table_md}, and the same "
              "command resumes after them", file=sys.stderr)
        raise
    raise BudgetReached(f"{exc}; {_arms_finished(len(rows))} in {table_md}, and the same command "
                        "resumes after them") from None


def _digest(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _compare_key(settings: Settings, base: CompileOptions, arms, variants, train: list, dev: list) -> str:
    """What makes two compares the same run: every option but ``threads``, the arms and variants, the LM / KG / text
    settings and the train and dev data."""
    return _digest({"options": {k: v for k, v in asdict(base).items() if k != "threads"}, "arms": list(arms),
                    "variants": [[value, kw] for value, kw in variants],
                    "settings": {k: v for k, v in settings.as_dict().items() if k in ("lm", "kg", "text", "models")},
                    "train": data_hash(train), "dev": data_hash(dev)})


def _read_state(out_dir: Path) -> dict | None:
    try:
        state = json.loads(CompareFolder(out_dir).arms.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("arms"), list) else None


def _write_state(out_dir: Path, key: str, rows: list[dict], complete: bool) -> None:
    from hqa.io.files import write_atomic

    write_atomic(CompareFolder(out_dir).arms, json.dumps({"key": key, "complete": complete, "arms": rows}, indent=1,
                                                   default=str) + "\n")


def _new_folder(settings: Settings, program: str) -> Path:
    """``artifacts/compare/<program>-<time>``, with ``-2``, ``-3``, … when a compare of the same second has it."""
    base = settings.artifacts_dir / "compare" / f"{program}-{time.strftime('%Y%m%d-%H%M%S')}"
    folder, n = base, 1
    while folder.exists():
        n += 1
        folder = base.with_name(f"{base.name}-{n}")
    return folder


def _stopped_compare(settings: Settings, program: str, key: str, out_dir: Path | None,
                     with_arms: bool = True) -> Path | None:
    """The folder of an earlier compare with these arguments (``key``) to resume: ``out_dir`` if it holds one
    (stopped or finished), else (no ``out_dir``) the newest stopped one under ``artifacts/compare/<program>-*``;
    None to start a new one.  ``with_arms``: only one with finished arms."""
    if out_dir is not None:
        state = _read_state(out_dir)
        return Path(out_dir) if state and state.get("key") == key and state["arms"] else None
    candidates = sorted((settings.artifacts_dir / "compare").glob(f"{glob.escape(program)}-*"),
                        key=lambda p: p.stat().st_mtime, reverse=True)
    for folder in candidates:
        state = _read_state(folder)
        if state and state.get("key") == key and not state.get("complete") and (state["arms"] or not with_arms):
            return folder
    return None


def compare_benchmarks(settings: Settings, base: CompileOptions, devs: tuple[str, ...],
                       arms: tuple[str, ...] = COMPARE_ARMS, out_dir: Path | None = None,
                       progress: bool = False, configure: bool | None = None,
                       budget: Budget | None = None, estimate=None, fresh: bool = False, engine: Any = "threads",
                       workers: int | None = None, ray_address: str | None = None) -> dict[str, Any]:
    """:func:`compare` once per benchmark (each with its own human library, HumanIQ §3), then one summary: the
    metric per arm and benchmark and their mean (HumanIQ Figure 6 reports the aggregate); resumable as
    :func:`compare`."""
    from hqa.reports.compare import write_table

    key = _digest({"options": {k: v for k, v in asdict(base).items() if k not in ("threads", "dev")},
                   "devs": list(devs), "arms": list(arms)})
    if out_dir is None and not fresh:
        out_dir = _stopped_compare(settings, base.program, key, None, with_arms=False)
    out_dir = Path(out_dir or _new_folder(settings, base.program))
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_state(out_dir, key, [], complete=False)
    import contextlib

    from hqa.jobs.engine import engine_in

    with contextlib.ExitStack() as stack:
        runner = engine_in(stack, engine, threads=base.threads, workers=workers, address=ray_address)
        results = {dev: compare(settings, replace(base, dev=dev), arms=arms, out_dir=out_dir / dev.replace("/", "_"),
                                progress=progress, configure=configure, budget=budget, estimate=estimate,
                                fresh=fresh, engine=runner)
                   for dev in devs}
    _write_state(out_dir, key, [], complete=True)
    metric = base.metric
    table = []
    for arm in arms:
        values = {dev: next(r[metric] for r in res["rows"] if r["arm"] == arm) for dev, res in results.items()}
        table.append({"arm": arm, **values, "aggregated": round(sum(values.values()) / len(values), 4)})
    folder = CompareFolder(out_dir)
    write_table(table, ["arm", *devs, "aggregated"], [f"# {base.program}: {metric} per benchmark", ""],
                folder.summary_md, folder.summary_csv)
    return {"rows": table, "table": str(folder.summary_md), "csv": str(folder.summary_csv), "benchmarks": results}

"""The compile job: compile → evaluate on dev → save, inside one MLflow run; its estimate and its budget guard.

The program is opened once (:func:`prepare`): that program is the student the optimizer compiles, the estimate's dry
run runs (a copy of) and the predictor count is read from.  :mod:`hqa.jobs.compare` uses the same for its arms.
"""

from __future__ import annotations

import glob
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hqa.artifacts.store import check_name, publish_artifact, stage_artifact
from hqa.config import Settings
from hqa.data.datasets import load_examples
from hqa.errors import ArtifactError
from hqa.jobs.budget import Budget
from hqa.optimize.compile import CompileOptions, compile_program, data_hash, exclude_overlap, excluded_questions
from hqa.schemas.run_folder import ROWS, RunFolder


def budget_guard(budget: Budget | None, what: str, after: str):
    """``budget.guard`` around an optimizer's work (nothing when there is no budget)."""
    import contextlib

    return contextlib.nullcontext() if budget is None else budget.guard(what, after)


def prepare(settings: Settings, opts: CompileOptions, configure: bool | None = None):
    """The train and dev splits, and the opened student (:func:`hqa.app.open_program`, ``student=True``); DSPy is
    configured with ``configure``, with None only when no LM is configured."""
    import dspy

    from hqa.app import open_program

    opts.validate()
    dev = load_examples(opts.dev, opts.dev_limit)
    train = exclude_overlap(load_examples(opts.train, opts.train_limit), dev + excluded_questions(opts.exclude_specs()))
    opened = open_program(settings, opts.program, program_kwargs=opts.program_kwargs,
                          configure=dspy.settings.lm is None if configure is None else configure, check_lm=False,
                          student=True)
    return train, dev, opened


def profile_for(opts: CompileOptions, dev: list, student, budget: Budget | None,
                earlier: list[Path] = ()) -> tuple[dict | None, str]:
    """Per-question means to estimate a compile or compare by: the newest of ``earlier`` predictions files with
    rows (an earlier compile of the same name), else a dry run of 2 dev questions with a copy of the uncompiled
    ``student``, which is charged to ``budget`` but not kept (a compiled program's prompts differ)."""
    from hqa.jobs.budget import profile
    from hqa.jobs.evaluate import evaluate
    from hqa.schemas.run_folder import read_rows

    for path in sorted(earlier, key=lambda p: p.stat().st_mtime, reverse=True):
        prof = profile(read_rows(path))
        if prof is not None:
            return prof, f"measured on {prof['n']} dev rows of an earlier compile in {path.parent}"
    probe = dev[:2]
    summary = evaluate(student.deepcopy(), probe, threads=min(opts.threads, len(probe)), budget=budget)
    return profile(summary.rows), (f"dry run of {len(probe)} dev questions with the uncompiled program, not kept: "
                                   "demos lengthen a compiled program's prompts")


def estimate_compile(estimate, prof: dict | None, source: str, arms: list[str], train_n: int, dev_n: int,
                     base: CompileOptions | None = None, predictors: int = 1, evaluated: bool = True) -> None:
    """Call ``estimate`` once for compiling ``arms`` (one optimizer name each, the other options ``base``'s) and,
    with ``evaluated``, evaluating each on the ``dev_n`` dev questions (:func:`hqa.jobs.budget.optimizer_calls`: an
    upper bound for the search optimizers, which the line names with their formulas)."""
    from hqa.jobs.budget import optimizer_calls

    opts = base or CompileOptions(program="?")
    plans = {a: optimizer_calls(a, train_n, dev_n, predictors=predictors, num_candidates=opts.num_candidates,
                                max_bootstrapped_demos=opts.max_bootstrapped_demos,
                                max_labeled_demos=opts.max_labeled_demos, gepa_budget=opts.budget) for a in set(arms)}
    eval_n = dev_n if evaluated else 0
    serial = sum(plans[a].serial for a in arms)
    parallel = sum(plans[a].parallel for a in arms)
    proposals = sum(plans[a].proposals for a in arms)
    what = (f"{len(arms)} arm{'s' if len(arms) > 1 else ''}: "
            + (f"up to {serial} optimizer questions (one at a time) + " if serial else "")
            + (f"{parallel} optimizer questions + " if parallel else "")
            + f"{eval_n * len(arms)} dev questions" + (f" + {proposals} proposal calls" if proposals else ""))
    searched = sorted(a for a in plans if a in ("bootstrap-rs", "mipro", "gepa"))
    note = ("an upper bound from the optimizers' call structure (docs/compiling.md): "
            + "; ".join(f"{a} {plans[a].formula}" for a in searched)) if searched else ""
    estimate(prof, eval_n * len(arms) + parallel, source, serial=serial, what=what, note=note, extra_calls=proposals)


def announce_estimate(estimate, opts: CompileOptions, optimizers: list[str], train: list, dev: list, student,
                      budget: Budget | None, earlier: list[Path] = (), evaluated: bool = True) -> None:
    """:func:`profile_for` then :func:`estimate_compile` for compiling ``student`` with each of ``optimizers``
    (MIPROv2's and GEPA's budgets grow with the uncompiled program's predictors)."""
    prof, source = profile_for(opts, dev, student, budget, earlier)
    estimate_compile(estimate, prof, source, optimizers, len(train), len(dev), base=opts,
                     predictors=max(1, len(student.predictors())), evaluated=evaluated)


def _manifest(settings: Settings, opts: CompileOptions, info: dict, train: list, dev: list, summary, toolbox,
              evaluate_dev: bool, run_id: str, record: dict) -> dict:
    pack_version = None
    if toolbox is not None and settings.kg.kind == "oxigraph":
        pack_version = toolbox.manifest.get("version")
    options = {k: v for k, v in asdict(opts).items() if k not in ("program", "program_kwargs")}
    if not evaluate_dev:  # no dev evaluation ran: no dev size to report
        options.pop("dev_limit", None)
    return {
        "program": opts.program,
        "program_kwargs": opts.program_kwargs,
        "wrapper": info.get("wrapper"),
        "optimizer": opts.optimizer,
        "options": options,
        "settings": {k: v for k, v in settings.as_dict().items() if k in ("lm", "kg", "text", "models")},
        "pack_version": pack_version,
        "data": {"train": opts.train, "dev": opts.dev, "train_n": len(train), "dev_n": len(dev),
                 "train_hash": data_hash(train), "dev_hash": data_hash(dev),
                 "excluded": list(opts.exclude_specs())},
        "metrics": summary.metrics if summary else {},
        "cost": summary.cost if summary else {},
        "mlflow_run_id": run_id,
        "record": record,
    }


def _target(settings: Settings, opts: CompileOptions, name: str | None, force: bool) -> tuple[str, Path]:
    """The artifact's name and folder; ArtifactError, before any data is loaded or any LM call is made, when the
    folder already holds a program and ``force`` is not given."""
    name = check_name(name or f"{opts.program}-{opts.optimizer.replace('+', '-')}")
    target = settings.artifacts_dir / "programs" / name
    if target.exists() and not force:
        raise ArtifactError(f"{target} already holds a compiled program; pass --force to replace it, or --name "
                            "NAME to save this one beside it")
    return name, target


def compile_and_save(settings: Settings, opts: CompileOptions, name: str | None = None, evaluate_dev: bool = True,
                     progress: bool = False, register: str | None = None,
                     configure: bool | None = None, force: bool = False, budget: Budget | None = None,
                     estimate=None) -> dict[str, Any]:
    """Compile, evaluate on dev, save ``artifacts/programs/<name>``; all inside one MLflow run, whose parameters,
    tags and ``record.json`` hold what ran (:mod:`hqa.tracking.record`, also the manifest's ``record``).  A folder that
    already holds a program is replaced only with ``force`` (ArtifactError otherwise, before any work).  ``budget``
    covers the optimizer's LM requests and the dev evaluation's: BudgetReached ends the job before anything is saved.
    ``estimate`` is called once before compiling (:func:`announce_estimate`)."""
    from hqa.jobs.evaluate import evaluate
    from hqa.optimize.mlflow_model import log_program
    from hqa.tracking import registry as tracking
    from hqa.tracking.record import log_record, run_record

    name, target = _target(settings, opts, name, force)
    train, dev, opened = prepare(settings, opts, configure)
    toolbox = opened.toolbox
    if estimate is not None:
        earlier = list((settings.artifacts_dir / "runs").glob(f"{glob.escape(name)}-*/{ROWS}"))
        announce_estimate(estimate, opts, [opts.optimizer], train, dev, opened.program, budget, earlier,
                          evaluated=evaluate_dev)
    run_dir = settings.artifacts_dir / "runs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    params = {"job": "compile", "name": name, **asdict(opts), "evaluate_dev": evaluate_dev}
    if not evaluate_dev:  # no dev evaluation ran: no dev size to report (dev questions are still kept out of demos)
        params.pop("dev_limit")
    staged = None
    try:
        with tracking.run(settings, f"compile:{name}", params=params, tags={"job": "compile"}) as active:
            start = time.monotonic()
            with budget_guard(budget, f"compiling {name}", "nothing was saved to artifacts/programs; the same command "
                              "again replays the requests already made from DSPy's LM cache, uncharged, and pays only "
                              "new ones"):
                program, info = compile_program(opts, train, dev, toolbox, student=opened.program)
            compile_s = time.monotonic() - start
            record = run_record(settings, program=program, toolbox=toolbox, seeds={"compile": opts.seed},
                                datasets={"train": (opts.train, train), **({"dev": (opts.dev, dev)} if evaluate_dev
                                                                            else {})})
            log_record(record)
            summary = None
            if evaluate_dev and dev:
                summary = evaluate(program, dev, threads=opts.threads, out=RunFolder(run_dir).rows_path,
                                   progress=progress, budget=budget)
                tracking.log_summary(summary, "dev")
            import mlflow

            mlflow.log_metric("compile_seconds", round(compile_s, 2))
            manifest = _manifest(settings, opts, info, train, dev, summary, toolbox, evaluate_dev, active.info.run_id,
                                 record)
            # written beside the target and logged from there; put in place only as the last step, so an interrupt
            # anywhere before it (Ctrl-C: exit 130) leaves a program already saved under this name as it was
            staged = stage_artifact(program, target, manifest)
            note = log_program(staged, settings=settings, register=register, name=name)
            registered = mlflow.get_run(active.info.run_id).data.tags.get("registered_model")
        publish_artifact(staged, target)
    except BaseException:
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)
        raise
    dest = target
    return {"artifact": str(dest), "run_id": active.info.run_id, "registered": registered, "metrics": manifest["metrics"],
            "cost": manifest["cost"], "compile_seconds": round(compile_s, 2), "log_model": note or "ok",
            "predictions": str(RunFolder(run_dir).rows_path) if summary else None}

"""The user jobs: compile → evaluate → save (tracked), and the human-vs-automatic few-shot comparison."""

from __future__ import annotations

import glob
import hashlib
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from hqa.jobs.budget import Budget, BudgetReached
from hqa.data.datasets import load_examples
from hqa.config import Settings
from hqa.errors import ArtifactError, ConfigError
from hqa.artifacts.store import check_name, save_artifact
from hqa.schemas.run_folder import ROWS, CompareFolder, RunFolder
from hqa.optimize.compile import (CompileOptions, compile_program, data_hash, exclude_overlap, excluded_questions)

#: HumanIQ RQ5 / Figure 6 (and RQ8's 0 / 1 / 3 examples): zero-shot (no solution process in the prompt; the merge
#: keeps its few-shots), random and adaptive (DPP) selection with 1 and 3 processes, relevance only and diversity
#: only with 3.  ``optimizer@k`` sets the number of processes for that arm.
RQ5_ARMS = ("dpp-human@0", "random-human@1", "random-human@3", "dpp-human@1", "dpp-human@3", "relevance-human@3",
            "diversity-human@3")
#: ``hqa compare``'s default: the RQ5 arms, then automatic few-shots (the project's human-vs-automatic question)
COMPARE_ARMS = RQ5_ARMS + ("bootstrap", "mipro", "human+bootstrap")


def _guard(budget: Budget | None, what: str, after: str):
    """``budget.guard`` around an optimizer's work (nothing when there is no budget)."""
    import contextlib

    return contextlib.nullcontext() if budget is None else budget.guard(what, after)


def _profile_for(settings: Settings, opts: CompileOptions, dev: list, toolbox, budget: Budget | None,
                 earlier: list[Path] = ()) -> tuple[dict | None, str]:
    """Per-question means to estimate a compile or compare by: the newest of ``earlier`` predictions files with
    rows (an earlier compile of the same name), else a dry run of 2 dev questions with the uncompiled program, which
    is charged to ``budget`` but not kept (a compiled program's prompts differ)."""
    from hqa.jobs.budget import profile
    from hqa.jobs.evaluate import evaluate
    from hqa.schemas.run_folder import read_rows
    from hqa.programs import build_program

    for path in sorted(earlier, key=lambda p: p.stat().st_mtime, reverse=True):
        prof = profile(read_rows(path))
        if prof is not None:
            return prof, f"measured on {prof['n']} dev rows of an earlier compile in {path.parent}"
    probe = dev[:2]
    summary = evaluate(build_program(opts.program, toolbox, **opts.program_kwargs), probe,
                       threads=min(opts.threads, len(probe)), budget=budget)
    return profile(summary.rows), (f"dry run of {len(probe)} dev questions with the uncompiled program, not kept: "
                                   "demos lengthen a compiled program's prompts")


def _estimate_compile(estimate, prof: dict | None, source: str, arms: list[str], train_n: int, dev_n: int,
                      base: CompileOptions | None = None, predictors: int = 1, evaluated: bool = True) -> None:
    """Call ``estimate`` once for compiling ``arms`` (one optimizer name each, the other options ``base``'s) and,
    with ``evaluated``, evaluating each on the ``dev_n`` dev questions: each optimizer's calls from its documented
    call structure (:func:`hqa.jobs.budget.optimizer_calls`, which is given the dev set as validation set as the
    recipes do), an upper bound for the search optimizers, which the line names with their formulas."""
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


def _predictors(opts: CompileOptions, toolbox) -> int:
    """How many predictors the uncompiled program has (MIPROv2's and GEPA's budgets grow with it)."""
    from hqa.programs import build_program

    return max(1, len(build_program(opts.program, toolbox, **opts.program_kwargs).predictors()))


def arm_options(base: CompileOptions, arm: str) -> CompileOptions:
    """The options of one compare arm: ``optimizer`` or ``optimizer@k`` (k human processes for that arm)."""
    optimizer, sep, k = arm.partition("@")
    if not sep:
        return replace(base, optimizer=arm)
    if not k.isdigit():
        raise ConfigError(f"compare arm {arm!r}: the part after '@' must be a number of demos (e.g. dpp-human@3)")
    return replace(base, optimizer=optimizer, k=int(k))


def _prepare(settings: Settings, opts: CompileOptions, configure: bool | None = None):
    """The train and dev splits, and the toolbox the programs are given (through :func:`hqa.app.open_program`, which
    also configures DSPy: always with ``configure``, the CLI's way; with None only when no LM is configured)."""
    import dspy

    from hqa.app import open_program

    opts.validate()
    dev = load_examples(opts.dev, opts.dev_limit)
    train = exclude_overlap(load_examples(opts.train, opts.train_limit), dev + excluded_questions(opts.exclude_specs()))
    opened = open_program(settings, opts.program, program_kwargs=opts.program_kwargs,
                          configure=dspy.settings.lm is None if configure is None else configure, check_lm=False)
    return train, dev, opened.toolbox


def _manifest(settings: Settings, opts: CompileOptions, info: dict, train: list, dev: list, summary, toolbox) -> dict:
    pack_version = None
    if toolbox is not None and settings.kg.kind == "oxigraph":
        pack_version = toolbox.manifest.get("version")
    return {
        "program": opts.program,
        "program_kwargs": opts.program_kwargs,
        "wrapper": info.get("wrapper"),
        "optimizer": opts.optimizer,
        "options": {k: v for k, v in asdict(opts).items() if k not in ("program", "program_kwargs")},
        "settings": {k: v for k, v in settings.as_dict().items() if k in ("lm", "kg", "text", "models")},
        "pack_version": pack_version,
        "data": {"train": opts.train, "dev": opts.dev, "train_n": len(train), "dev_n": len(dev),
                 "train_hash": data_hash(train), "dev_hash": data_hash(dev),
                 "excluded": list(opts.exclude_specs())},
        "metrics": summary.metrics if summary else {},
        "cost": summary.cost if summary else {},
    }


def compile_and_save(settings: Settings, opts: CompileOptions, name: str | None = None, evaluate_dev: bool = True,
                     progress: bool = False, register: str | None = None,
                     configure: bool | None = None, force: bool = False, budget: Budget | None = None,
                     estimate=None) -> dict[str, Any]:
    """Compile, evaluate on dev, save ``artifacts/programs/<name>``; all inside one MLflow run, whose parameters,
    tags and ``record.json`` hold what ran (:mod:`hqa.tracking.record`, also the manifest's ``record``).  A folder that
    already holds a program is replaced only with ``force`` (ArtifactError otherwise, before any work).

    ``budget`` (:class:`hqa.jobs.budget.Budget`) covers the optimizer's LM requests and the dev evaluation's; when it is
    reached, :class:`hqa.jobs.budget.BudgetReached` ends the job before anything is saved under ``artifacts/programs``.
    ``estimate(profile, left, source, serial=, what=, note=)`` is called once before compiling (see
    :func:`_profile_for` and :func:`hqa.jobs.budget.estimate_line`)."""
    from hqa.jobs.evaluate import evaluate
    from hqa.tracking import registry as tracking
    from hqa.optimize.mlflow_model import log_program

    from hqa.tracking.record import log_record, run_record

    name = check_name(name or f"{opts.program}-{opts.optimizer.replace('+', '-')}")
    target = settings.artifacts_dir / "programs" / name
    if target.exists() and not force:  # one line, before any data is loaded or any LM call is made
        raise ArtifactError(f"{target} already holds a compiled program; pass --force to replace it, or --name "
                            "NAME to save this one beside it")
    train, dev, toolbox = _prepare(settings, opts, configure)
    if estimate is not None:
        earlier = list((settings.artifacts_dir / "runs").glob(f"{glob.escape(name)}-*/{ROWS}"))
        prof, source = _profile_for(settings, opts, dev, toolbox, budget, earlier)
        _estimate_compile(estimate, prof, source, [opts.optimizer], len(train), len(dev), base=opts,
                          predictors=_predictors(opts, toolbox), evaluated=evaluate_dev)
    run_dir = settings.artifacts_dir / "runs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    params = {"job": "compile", "name": name, **asdict(opts), "evaluate_dev": evaluate_dev}
    if not evaluate_dev:  # no dev evaluation ran: no dev size to report (dev questions are still kept out of demos)
        params.pop("dev_limit")
    with tracking.run(settings, f"compile:{name}", params=params, tags={"job": "compile"}) as active:
        start = time.monotonic()
        with _guard(budget, f"compiling {name}", "nothing was saved to artifacts/programs; the same command "
                    "again replays the requests already made from DSPy's LM cache, uncharged, and pays only new ones"):
            program, info = compile_program(opts, train, dev, toolbox)
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
        manifest = _manifest(settings, opts, info, train, dev, summary, toolbox)
        manifest["mlflow_run_id"] = active.info.run_id
        manifest["record"] = record
        if not evaluate_dev:
            manifest["options"].pop("dev_limit", None)
        dest = save_artifact(program, target, manifest)
        note = log_program(dest, settings=settings, register=register)
        registered = mlflow.get_run(active.info.run_id).data.tags.get("registered_model")
    return {"artifact": str(dest), "run_id": active.info.run_id, "registered": registered, "metrics": manifest["metrics"],
            "cost": manifest["cost"], "compile_seconds": round(compile_s, 2), "log_model": note or "ok",
            "predictions": str(RunFolder(run_dir).rows_path) if summary else None}


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
            budget: Budget | None = None, estimate=None, fresh: bool = False) -> dict[str, Any]:
    """Every arm compiled and evaluated on the same dev set; a table (md + csv) and a bar plot with 95% CIs.
    ``budget`` covers every arm's compile and evaluation: when it is reached, the table of the arms that finished
    is written and :class:`hqa.jobs.budget.BudgetReached` names it (the stopped arm's rows so far stay in its JSONL).
    ``variants`` (:func:`parse_vary`) crosses the optimizer arms with program-kwargs arms (e.g. SS-CoT Table 3's
    source orders); a row's ``arm`` is then ``VALUE`` (one optimizer) or ``OPTIMIZER:VALUE``.

    Resumable: each finished arm's row is kept in ``<out_dir>/arms.json`` with a key of the arguments (options but
    ``threads``, arms, variants, the LM / KG / text settings, the train and dev data).  A compare stopped by a budget
    or Ctrl-C and run again with the same arguments (``out_dir`` the stopped one's, or None: the newest stopped one
    under ``artifacts/compare``) reuses those rows, says so in one line and runs the other arms (a stopped arm runs
    again from its start); ``fresh`` starts a new compare instead."""
    from hqa.jobs.evaluate import evaluate
    from hqa.tracking import registry as tracking
    from hqa.scoring.stats import paired_bootstrap

    train, dev, toolbox = _prepare(settings, base, configure)
    grid = [(arm, arm, {}) for arm in arms] if not variants else [
        (opt, value if len(arms) == 1 else f"{opt}:{value}", kw) for opt in arms for value, kw in variants]
    key = _compare_key(settings, base, arms, variants, train, dev)
    resumed = None if fresh else _stopped_compare(settings, base.program, key, out_dir)
    out_dir = Path(resumed or out_dir or _new_folder(settings, base.program))
    finished = {r["arm"]: r for r in (_read_state(out_dir) or {}).get("arms", [])} if resumed else {}
    if resumed:
        print(f"hqa: compare resumes {out_dir}: {len(finished)} finished arm{'s' if len(finished) != 1 else ''} "
              f"reused ({', '.join(finished)}), {len(grid) - len(finished)} to run", file=sys.stderr)
    todo = [g for g in grid if g[1] not in finished]
    if estimate is not None and todo:  # the optimizer of every arm still to run, crossed with --vary's values
        prof, source = _profile_for(settings, base, dev, toolbox, budget)
        _estimate_compile(estimate, prof, source, [arm_options(base, opt).optimizer for opt, _a, _kw in todo],
                          len(train), len(dev), base=base, predictors=_predictors(base, toolbox))
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    from hqa.tracking.record import log_record, run_record

    with tracking.run(settings, f"compare:{base.program}", params={"job": "compare", "arms": ",".join(arms),
                                                                    **asdict(base)}, tags={"job": "compare"}) as parent:
        log_record(run_record(settings, toolbox=toolbox, seeds={"compile": base.seed},
                              datasets={"train": (base.train, train), "dev": (base.dev, dev)}))
        try:
            for optimizer_name, arm, kwargs in grid:
                if arm in finished:  # a stopped compare's arm, run with the same arguments: its row is reused
                    rows.append(finished[arm])
                    continue
                opts = arm_options(base, optimizer_name)
                opts = replace(opts, program_kwargs={**opts.program_kwargs, **kwargs})
                with tracking.run(settings, f"{base.program}:{arm}", params={"arm": arm}, nested=True) as child:
                    start = time.monotonic()
                    with _guard(budget, f"compiling arm {arm}", "the arms before it are kept"):
                        program, _info = compile_program(opts, train, dev, toolbox)
                    compile_s = time.monotonic() - start
                    summary = evaluate(program, dev, threads=base.threads,
                                       out=CompareFolder(out_dir).arm_rows(arm),
                                       resume=False, progress=progress, budget=budget)
                    tracking.log_summary(summary, "dev")
                    metric_values = [r["scores"][base.metric] for r in summary.rows]
                    lo, hi = paired_bootstrap(metric_values, seed=base.seed)
                    rows.append({"arm": arm, "n": summary.n, **summary.metrics, "ci_low": lo, "ci_high": hi,
                                 **{f"{k}_per_q": v for k, v in summary.cost.items()}, "errors": summary.errors,
                                 "compile_s": round(compile_s, 1), "run_id": child.info.run_id})
                    _write_state(out_dir, key, rows, complete=False)
        except (BudgetReached, KeyboardInterrupt) as exc:
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
        _write_state(out_dir, key, rows, complete=True)
        from hqa.reports.compare import write_compare_outputs

        table_md, table_csv, plot = write_compare_outputs(rows, base.metric, out_dir,
                                                          title=f"{base.program} on {base.dev}")
        import mlflow

        for path in (table_md, table_csv, plot):
            mlflow.log_artifact(str(path), artifact_path="compare")
    return {"rows": rows, "table": str(table_md), "csv": str(table_csv), "plot": str(plot), "run_id": parent.info.run_id}




def _compare_key(settings: Settings, base: CompileOptions, arms, variants, train: list, dev: list) -> str:
    """What makes two compares the same run: every option but ``threads``, the arms and variants, the LM / KG / text
    settings and the train and dev data."""
    payload = {"options": {k: v for k, v in asdict(base).items() if k != "threads"}, "arms": list(arms),
               "variants": [[value, kw] for value, kw in variants],
               "settings": {k: v for k, v in settings.as_dict().items() if k in ("lm", "kg", "text", "models")},
               "train": data_hash(train), "dev": data_hash(dev)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


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


def _stopped_compare(settings: Settings, program: str, key: str, out_dir: Path | None) -> Path | None:
    """The folder of an earlier compare with these arguments whose arms to reuse: ``out_dir`` if it holds one
    (stopped or finished), else (no ``out_dir``) the newest stopped one under ``artifacts/compare/<program>-*``;
    None to start a new one."""
    if out_dir is not None:
        state = _read_state(out_dir)
        return Path(out_dir) if state and state.get("key") == key and state["arms"] else None
    candidates = sorted((settings.artifacts_dir / "compare").glob(f"{glob.escape(program)}-*"),
                        key=lambda p: p.stat().st_mtime, reverse=True)
    for folder in candidates:
        state = _read_state(folder)
        if state and state.get("key") == key and not state.get("complete") and state["arms"]:
            return folder
    return None


def compare_benchmarks(settings: Settings, base: CompileOptions, devs: tuple[str, ...],
                       arms: tuple[str, ...] = COMPARE_ARMS, out_dir: Path | None = None,
                       progress: bool = False, configure: bool | None = None,
                       budget: Budget | None = None, estimate=None, fresh: bool = False) -> dict[str, Any]:
    """:func:`compare` once per benchmark (each with its own human library, HumanIQ §3), then one summary: the
    metric per arm and benchmark and their mean over benchmarks (HumanIQ Figure 6 reports the aggregate).  Run
    again with the same arguments after a stop (no ``out_dir``: the newest stopped one), each benchmark's compare
    reuses its finished arms (:func:`compare`)."""
    import csv

    from hqa.io.files import write_atomic

    key = hashlib.sha256(json.dumps({"options": {k: v for k, v in asdict(base).items() if k not in ("threads", "dev")},
                                     "devs": list(devs), "arms": list(arms)}, sort_keys=True, default=str)
                         .encode()).hexdigest()[:16]
    if out_dir is None and not fresh:
        for folder in sorted((settings.artifacts_dir / "compare").glob(f"{glob.escape(base.program)}-*"),
                             key=lambda p: p.stat().st_mtime, reverse=True):
            state = _read_state(folder)
            if state and state.get("key") == key and not state.get("complete"):
                out_dir = folder
                break
    out_dir = Path(out_dir or _new_folder(settings, base.program))
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_state(out_dir, key, [], complete=False)
    results = {dev: compare(settings, replace(base, dev=dev), arms=arms, out_dir=out_dir / dev.replace("/", "_"),
                            progress=progress, configure=configure, budget=budget, estimate=estimate, fresh=fresh)
               for dev in devs}
    _write_state(out_dir, key, [], complete=True)
    metric = base.metric
    table = []
    for arm in arms:
        values = {dev: next(r[metric] for r in res["rows"] if r["arm"] == arm) for dev, res in results.items()}
        table.append({"arm": arm, **values, "aggregated": round(sum(values.values()) / len(values), 4)})
    cols = ["arm", *devs, "aggregated"]
    md = [f"# {base.program}: {metric} per benchmark", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in table]
    out_dir.mkdir(parents=True, exist_ok=True)
    summary_md = CompareFolder(out_dir).summary_md
    write_atomic(summary_md, "\n".join(md) + "\n")
    summary_csv = CompareFolder(out_dir).summary_csv
    with open(summary_csv, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=cols)
        writer.writeheader()
        writer.writerows(table)
    return {"rows": table, "table": str(summary_md), "csv": str(summary_csv), "benchmarks": results}

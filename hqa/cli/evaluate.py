"""``hqa evaluate``: evaluate a program or compiled artifact on a dataset, resumable (the job:
:func:`hqa.jobs.evaluate.run_evaluate_job`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hqa.cli import args as shared
from hqa.cli.output import estimate_printer
from hqa.errors import HQAError


def add_arguments(sp: argparse.ArgumentParser) -> None:
    shared.add_program_args(sp)
    sp.add_argument("--dataset", default="humaniq-compmix", help="dataset spec (e.g. compmix/test, mintaka/test)")
    sp.add_argument("--limit", type=int, help="most questions answered (default: all)")
    sp.add_argument("--threads", type=shared.at_least_one, default=1, help="questions answered at once")
    sp.add_argument("--out", help="output folder (default artifacts/eval/<program>-<dataset>)")
    sp.add_argument("--fresh", action="store_true", help="discard earlier results instead of resuming")
    sp.add_argument("--shard", metavar="I/N", help="answer only shard I of N of the questions (every N-th from the "
                                                   "I-th), into its own folder; hqa runs merge joins the shards")
    shared.add_engine_args(sp)
    shared.add_budget_args(sp)


def run(args: argparse.Namespace) -> int:
    from hqa.jobs.budget import Budget, BudgetReached
    from hqa.jobs.evaluate import run_evaluate_job

    if args.limit is not None and args.limit < 1:
        raise HQAError(f"--limit must be at least 1, got {args.limit}")
    from hqa.jobs.shards import Shard

    shard = Shard.parse(args.shard) if args.shard else None
    engine = shared.engine_args(args)
    settings = shared.settings(args)
    budget = Budget.from_args(args, settings.lm)  # a bad budget or an unpriced model: refused before any work
    try:
        done = run_evaluate_job(settings, args.dataset, program=args.program, load=args.load,
                                program_kwargs=shared.program_kwargs(args) if args.program_kwargs else None,
                                limit=args.limit, threads=args.threads, out=Path(args.out) if args.out else None,
                                fresh=args.fresh, traces=shared.traces(args, settings), budget=budget,
                                warn=shared.warn, estimate=lambda label: estimate_printer(args, settings, label),
                                shard=shard, **engine)
    except BudgetReached as stop:  # the report over the rows answered, then the stop as hqa's error line
        if stop.run is not None:
            show(stop.run)
        raise
    show(done)
    return 0


def show(done) -> None:
    """The run's report and where its files and MLflow run are."""
    from hqa.schemas.run_folder import RunFolder

    print(RunFolder(done.folder).summary_md.read_text(encoding="utf-8"))
    print(f"report: {done.folder}/summary.md, summary.json, metrics.png, agreement.png; rows: {done.summary.path}; "
          f"mlflow run: {done.run_id}")

"""``hqa batch QUESTIONS --out ROWS``: answer a .jsonl/.csv of questions into a resumable JSONL with traces."""

from __future__ import annotations

import argparse
from pathlib import Path

from hqa.cli import args as shared


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("input", help="questions: .jsonl (objects with question[, id]) or .csv (question[,id] header)")
    sp.add_argument("--out", required=True, help="output .jsonl (appended per question; reruns resume)")
    shared.add_program_args(sp)
    sp.add_argument("--threads", type=shared.at_least_one, default=1, help="questions answered at once")
    sp.add_argument("--fresh", action="store_true", help="discard earlier rows instead of resuming")
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    shared.add_engine_args(sp)


def run(args: argparse.Namespace) -> int:
    from hqa.jobs.batch import read_questions, run_batch
    from hqa.jobs.engine import ProgramSpec, make_engine

    engine = shared.engine_args(args)
    questions = read_questions(Path(args.input))
    settings = shared.settings(args)
    opened = shared.open_program(args, settings)
    traces = None
    if shared.traces(args, settings):  # every question an MLflow trace in the configured tracking store
        from hqa.tracking.runs import TraceSpec, enable_traces

        traces = TraceSpec.of(settings, None, enable_traces(settings, opened))
    spec = ProgramSpec.of(settings, program=None if args.load else args.program, load=args.load,
                          program_kwargs=shared.program_kwargs(args))
    with make_engine(engine["engine"], threads=args.threads, workers=engine["workers"],
                     address=engine["ray_address"], traces=traces) as runner:
        summary = run_batch(opened.program, questions, Path(args.out), threads=args.threads, resume=not args.fresh,
                            progress=not args.quiet, engine=runner, spec=spec)
    print(f"{summary.n} questions answered ({summary.errors} failed; a rerun asks those again) -> {args.out}")
    return 0

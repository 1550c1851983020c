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


def run(args: argparse.Namespace) -> int:
    from hqa.jobs.batch import read_questions, run_batch

    questions = read_questions(Path(args.input))
    settings = shared.settings(args)
    opened = shared.open_program(args, settings)
    shared.trace_questions(args, settings, opened)  # every question an MLflow trace in the configured tracking store
    summary = run_batch(opened.program, questions, Path(args.out), threads=args.threads, resume=not args.fresh,
                        progress=not args.quiet)
    print(f"{summary.n} questions answered ({summary.errors} failed; a rerun asks those again) -> {args.out}")
    return 0

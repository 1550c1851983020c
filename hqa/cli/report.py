"""``hqa report KIND RUN…``: reports on evaluation runs.  The kinds and their handlers are the table
:data:`hqa.cli.registry.REPORT_KINDS`; each handler checks its own arguments, imports its report functions when it
runs, and prints markdown (or JSON with ``--json``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from hqa.cli.registry import REPORT_KINDS, resolve
from hqa.errors import HQAError
from hqa.scoring.stats import BENCHMARKS


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("action", choices=list(REPORT_KINDS))
    sp.add_argument("runs", nargs="*", help="run folders (with predictions.jsonl); for import, the authors' files "
                                            "(paths, or data-directory names such as humaniq/long_data/<file>.json and "
                                            "humaniq/late_fusion/<file>.json, fetched on first use)")
    sp.add_argument("--metric", default="recall", choices=["em", "f1", "recall", "hits1", "qald_f1"])
    sp.add_argument("--dataset", choices=["compmix", "mintaka", "qald", "all"],
                    help="library: whose processes (default all); import: the benchmark (default: from file names)")
    sp.add_argument("--library", help="library: a folder laid out like hqa/data/humaniq (default: the shipped one)")
    sp.add_argument("--out", help="import: the run folder to write; show with several runs: the pooled folder")
    sp.add_argument("--fresh", action="store_true", help="import: replace an existing run folder's rows")
    sp.add_argument("--skip-empty", action="store_true",
                    help="import: leave out the empty records of the authors' file instead of keeping error rows")
    sp.add_argument("--json", action="store_true")
    sp.add_argument("--closed-book", help="divknowqa: a closedbook run folder for DIVKNOWQA Table 4's overlap")


def run(args: argparse.Namespace) -> int:
    return resolve(REPORT_KINDS[args.action])(args)


def _print(args: argparse.Namespace, data, markdown: Callable[[Any], str] | None = None, *,
           folder: Path | None = None) -> int:
    """``data`` as JSON with --json, else rendered by ``markdown`` (or the run folder's summary.md)."""
    if args.json:
        print(json.dumps(data, indent=2, default=str))
    elif folder is not None:
        from hqa.schemas.run_folder import RunFolder

        print(RunFolder(folder).summary_md.read_text(encoding="utf-8"))
    else:
        print(markdown(data))
    return 0


def _benchmarks(args: argparse.Namespace) -> tuple[str, ...]:
    return BENCHMARKS if args.dataset in (None, "all") else (args.dataset,)


def show(args: argparse.Namespace) -> int:
    from hqa.reports.summary import write_report

    if not args.runs or (len(args.runs) > 1 and not args.out):
        raise HQAError("usage: hqa report show RUN_DIR, or hqa report show RUN_DIR RUN_DIR ... --out POOLED_DIR")
    if len(args.runs) > 1:  # one report over several runs (HumanIQ Table 5's per-benchmark and Aggregated)
        from hqa.reports.summary import pool_runs

        summary, folder = pool_runs([Path(r) for r in args.runs], Path(args.out)), Path(args.out)
    else:
        summary, folder = write_report(Path(args.runs[0])), Path(args.runs[0])
    return _print(args, summary, folder=folder)


def compare(args: argparse.Namespace) -> int:
    from hqa.reports.compare import compare_markdown, compare_runs

    if len(args.runs) != 2:
        raise HQAError("usage: hqa report compare RUN_A RUN_B")
    return _print(args, compare_runs(Path(args.runs[0]), Path(args.runs[1]), metric=args.metric), compare_markdown)


def library(args: argparse.Namespace) -> int:
    """HumanIQ RQ8: tool calls and tokens per human solution process."""
    from hqa.reports.library import library_markdown, library_stats

    if args.runs:
        raise HQAError("usage: hqa report library [--dataset compmix|mintaka|qald|all] [--library DIR]")
    return _print(args, library_stats(_benchmarks(args), path=Path(args.library) if args.library else None),
                  library_markdown)


def import_authors(args: argparse.Namespace) -> int:
    """The HumanIQ authors' GPT-4 outputs as a run folder."""
    from hqa.data.authors_runs import import_run
    from hqa.reports.summary import write_report

    if not args.runs or not args.out:
        raise HQAError("usage: hqa report import FILE [FILE ...] --out RUN_DIR [--dataset compmix|mintaka|qald]")
    dataset = None if args.dataset in (None, "all") else args.dataset
    from hqa.data.store import data_path

    info = import_run([data_path(f) for f in args.runs], Path(args.out), benchmark=dataset,
                      skip_empty=args.skip_empty, overwrite=args.fresh)
    summary = write_report(Path(args.out), title=f"HumanIQ authors' GPT-4 run ({info['kind']}, "
                                                 f"{info['benchmark']})")
    return _print(args, summary, folder=Path(args.out))


def divknowqa(args: argparse.Namespace) -> int:
    """DIVKNOWQA Tables 2-6 over detllm arms (hqa/reports/divknowqa.py)."""
    from hqa.reports.divknowqa import divknowqa_markdown, divknowqa_tables

    if not args.runs:
        raise HQAError("usage: hqa report divknowqa RUN_DIR [RUN_DIR ...] [--closed-book RUN_DIR]")
    result = divknowqa_tables([Path(r) for r in args.runs], Path(args.closed_book) if args.closed_book else None)
    return _print(args, result, divknowqa_markdown)


def sscot(args: argparse.Namespace) -> int:
    """SS-CoT Tables 1-3 over closedbook / cot / sscot runs (hqa/reports/sscot.py)."""
    from hqa.reports.sscot import sscot_markdown, sscot_tables

    if not args.runs:
        raise HQAError("usage: hqa report sscot RUN_DIR [RUN_DIR ...]")
    result = sscot_tables([Path(r) for r in args.runs])
    return _print(args, result, sscot_markdown)


def thoughts(args: argparse.Namespace) -> int:
    """HumanIQ Table 8: generated vs human-written thoughts (JSD)."""
    from hqa.data.human import load_human_library
    from hqa.reports.thoughts import run_thoughts, thought_divergence, thought_markdown
    from hqa.retrievers.embedding.encoders import DEFAULT_EMBEDDER, embed
    from hqa.schemas.run_folder import RunFolder, read_rows

    if len(args.runs) != 2:
        raise HQAError("usage: hqa report thoughts BASELINE_RUN HQA_RUN [--dataset compmix|mintaka|qald|all] "
                       "(runs: folders or compare's ARM.jsonl)")
    human = [[st.thought.strip() for st in d.steps if st.thought and st.thought.strip()]
             for d in load_human_library(_benchmarks(args), path=Path(args.library) if args.library else None)]
    base, hqa_rows = (read_rows(RunFolder.of(r)[1])
                      for r in args.runs)  # a run folder, or one arm's rows of hqa compare (ARM.jsonl)
    if not base or not hqa_rows:
        raise HQAError("both runs need predictions.jsonl rows (hqa evaluate --out RUN)")
    result = thought_divergence(run_thoughts(base), run_thoughts(hqa_rows), human,
                                lambda texts: embed(texts, DEFAULT_EMBEDDER))
    return _print(args, result, lambda r: thought_markdown(r, DEFAULT_EMBEDDER))

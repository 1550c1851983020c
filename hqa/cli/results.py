"""``hqa results [RUN…] [--study NAME]``: one table over run folders (hqa.reports.results)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hqa.cli import args as shared
from hqa.errors import DataError


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("runs", nargs="*", help="run folders (hqa evaluate --out, a study's cell folders)")
    sp.add_argument("--study", help="every cell of a study: its name (artifacts/studies/NAME) or its folder")
    sp.add_argument("--baseline", help="pair every row with this row of the same dataset: a row number, a program "
                                       "or label, or key=value,... (e.g. label=closedbook,lm=openai:gpt-4o-mini)")
    sp.add_argument("--format", default="terminal", choices=["terminal", "md", "latex", "csv", "json", "eee", "html"],
                    help="how the table is printed or written (eee: Every Eval Ever records)")
    sp.add_argument("--out", help="write the table to this file instead of printing it")
    sp.add_argument("--pivot", choices=["benchmark", "source", "errors"],
                    help="also break every row down by benchmark, by source (HumanIQ Table 5) or by error category "
                         "(HumanIQ Table 9)")
    sp.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resamples and permutations")


def folders(args: argparse.Namespace, settings) -> list[Path]:
    """The run folders the arguments name: the RUNs, then every cell folder (with rows) of ``--study``."""
    from hqa.schemas.run_folder import RunFolder

    out = [Path(r) for r in args.runs]
    if args.study:
        named = settings.artifacts_dir / "studies" / args.study
        base = named if named.is_dir() else Path(args.study)  # a study's name first, else its folder
        if not base.is_dir():
            raise DataError(f"no study {args.study!r} (neither {named} nor a folder)")
        cells = sorted(p for p in base.iterdir() if RunFolder(p).rows_path.exists())
        if not cells:
            raise DataError(f"{base} holds no cell folder with rows (run hqa study first)")
        out += cells
    if not out:
        raise DataError("name run folders or --study NAME")
    missing = [str(p) for p in out if not RunFolder(p).rows_path.exists()]
    if missing:
        raise DataError(f"no predictions.jsonl in {', '.join(missing)}")
    return out


def run(args: argparse.Namespace) -> int:
    from hqa.io.files import write_atomic
    from hqa.reports.results import pivot_markdown, render, results_table

    settings = shared.settings(args)
    result = results_table(folders(args, settings), baseline=args.baseline, seed=args.seed)
    title = f"study {args.study}" if args.study else "results"
    text = render(result, args.format, title)
    if args.pivot:
        text += "\n\n" + pivot_markdown(result, args.pivot)
    if args.out:
        write_atomic(Path(args.out), text if text.endswith("\n") else text + "\n")
        print(f"results: {args.out}")
    else:
        print(text)
    return 0

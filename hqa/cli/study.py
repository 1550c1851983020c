"""``hqa study FILE``: a study file's cells run as one job, or estimated with ``--dry-run`` (hqa.jobs.study)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hqa.cli import args as shared
from hqa.errors import ConfigError, HQAError


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("file", help="the study file (TOML: [study], [[program]], [[dataset]], [[lm]]; docs/studies.md)")
    sp.add_argument("--dry-run", action="store_true",
                    help="print every cell, the command that runs it alone and its estimate, then stop; the "
                         "per-question figures come from a cell's earlier rows, else from --probe questions asked "
                         "now (kept in the cell's folder)")
    sp.add_argument("--probe", type=int, default=1, help="with --dry-run: questions asked per cell to measure it "
                                                         "(0: only cells with earlier rows are estimated)")
    sp.add_argument("--price-as", metavar="MODEL", help="with --dry-run: price every cell at MODEL's prices in "
                                                        "hqa/data/prices.json (e.g. a dry run with the embedded LM "
                                                        "priced as gpt-4o-mini)")
    sp.add_argument("--limit", type=shared.at_least_one, help="most questions per dataset (caps the file's limits)")
    sp.add_argument("--lm", dest="study_lm", metavar="LM",
                    help="run every cell with this LM instead of the file's: a name of the file's [[lm]] entries, "
                         "local, openai:MODEL or openai_compatible:MODEL@URL")
    sp.add_argument("--threads", type=shared.at_least_one, help="questions in flight across all cells (default: the "
                                                                "file's [study] threads)")
    sp.add_argument("--out", help="the study's folder (default artifacts/studies/<name>)")
    sp.add_argument("--fresh", action="store_true", help="discard the cells' earlier rows instead of resuming")
    sp.add_argument("--json", action="store_true", help="print the dry run's estimate as JSON")
    sp.add_argument("--max-lm-calls", type=int, help="stop the whole study once its questions made this many LM "
                                                     "requests; the rows so far are kept and a rerun resumes")
    sp.add_argument("--max-cost", type=float, metavar="DOLLARS",
                    help="stop the whole study once its questions cost this many US dollars (each cell at its LM's "
                         "price)")
    shared.add_engine_args(sp)


def _lms(study, text: str | None):
    if not text:
        return None
    from hqa.schemas.study import parse_lm_spec

    named = [lm for lm in study.lm if lm.name == text]
    return named or [parse_lm_spec(text)]


def run(args: argparse.Namespace) -> int:
    from hqa.jobs.budget import Price, load_prices
    from hqa.jobs.study import plan, run_study, study_budget
    from hqa.schemas.study import load_study

    if args.probe < 0:
        raise ConfigError(f"--probe must be 0 or more, got {args.probe}")
    engine = shared.engine_args(args)
    settings = shared.settings(args)
    study = load_study(Path(args.file))
    lms = _lms(study, args.study_lm)
    out = Path(args.out) if args.out else None
    price_as = None
    if args.price_as:
        entry = load_prices().get(args.price_as)
        if entry is None:
            raise ConfigError(f"--price-as {args.price_as}: not in hqa/data/prices.json")
        price_as = Price(model=args.price_as, prompt=float(entry["prompt"]), cached_prompt=float(entry["cached_prompt"]),
                         completion=float(entry["completion"]), source=str(entry.get("source", "")))
    cells = plan(settings, study, out=out, limit=args.limit, lms=lms, path=args.file)
    budget = study_budget(args.max_lm_calls, args.max_cost, cells)
    result = run_study(settings, study, path=args.file, out=out, limit=args.limit, lms=lms, threads=args.threads,
                       budget=budget, dry_run=args.dry_run, probe=args.probe, fresh=args.fresh, price_as=price_as,
                       **engine)
    if args.dry_run:
        if args.json:
            print(json.dumps(result.estimate, indent=1, default=str))
        else:
            print(estimate_text(result.estimate, price_as))
        return 1 if result.failed else 0
    if result.table:
        print(Path(result.table["md"]).read_text(encoding="utf-8"))
        print(f"table: {result.table['md']} (also .csv, .json, .tex, .eee.json, .html); study folder: {result.folder}; "
              f"mlflow run: {result.run_id}; {result.seconds:.0f} s")
    if result.failed:  # each failed cell was named in one line as it failed
        print(f"hqa: {len(result.failed)} of {len(result.cells)} cells failed: {', '.join(result.failed)}; the table "
              "has the others, and the same command asks the failed ones again", file=sys.stderr)
    if not result.table:
        raise HQAError(f"no cell of study {study.study.name} answered a question")
    return 1 if result.failed else 0


def _num(v, digits: int = 0) -> str:
    return "–" if v is None else f"{v:,.{digits}f}"


def estimate_text(lines: list[dict], price_as=None) -> str:
    """The dry run as text: one block per cell (its command, per-question figures and estimate), then the total."""
    from hqa.jobs.budget import _duration

    out = []
    for line in lines:
        if "total" in line:
            t = line["total"]
            priced = f" at {price_as.model} prices" if price_as else ""
            out.append(f"total: {t['left']:,} questions left, ~{_num(t['lm_calls'])} LM calls, "
                       f"~{_num(t['prompt_tokens'])} prompt / ~{_num(t['completion_tokens'])} completion tokens, "
                       f"~${t['cost']:.2f}{priced}, ~{_duration(t['wall'])} at --threads {t['threads']} (the cells "
                       "share the threads)")
            continue
        out.append(f"cell {line['cell']}: {line['n']} questions")
        out.append(f"  command: {line['command']}")
        if line.get("failed"):
            out.append(f"  failed: {line['failed']}")
            continue
        per = line.get("per_q")
        if per is None:
            out.append(f"  estimate unavailable ({line.get('source')}); {line.get('left')} questions left")
            continue
        cost = "–" if line.get("cost") is None else f"${line['cost']:.4f}"
        out.append(f"  measured on {line['source']}: {per['lm_calls']:.1f} LM calls, {per['prompt_tokens']:,.0f} prompt "
                   f"({per['cached_prompt_tokens']:,.0f} cached) / {per['completion_tokens']:,.0f} completion tokens, "
                   f"{per['seconds']:.1f} s per question")
        out.append(f"  {line['left']} left: ~{line['lm_calls']:,.0f} LM calls, {cost}"
                   f"{' at ' + line['price'] + ' prices' if line.get('price') else ''}, ~{_duration(line['seconds'])} "
                   "of one thread")
    return "\n".join(out)

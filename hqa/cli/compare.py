"""``hqa compare``: human vs automatic few-shots on one dev set (or several): table, CSV, plot (hqa.jobs.compare)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hqa.cli import args as shared
from hqa.cli.compile import add_options, options
from hqa.cli.output import estimate_printer
from hqa.errors import ConfigError


def add_arguments(sp: argparse.ArgumentParser) -> None:
    add_options(sp, with_optimizer=False)
    sp.add_argument("--arms", help="comma-separated optimizers, optimizer@k for k demos (default: HumanIQ RQ5's "
                                   "arms, then bootstrap, mipro, human+bootstrap; 'none' with --vary); --dev may "
                                   "list several benchmarks")
    sp.add_argument("--vary", help="program-kwargs arms KEY=V1;V2;... crossed with the optimizer arms, e.g. "
                                   "--program sscot --vary 'sources=kg,text,model;text,kg,model;model'")
    sp.add_argument("--out", help="output folder (default artifacts/compare/<program>-<time>)")
    sp.add_argument("--fresh", action="store_true", help="start a new compare instead of resuming a stopped one "
                                                         "with the same arguments (reusing its finished arms)")
    shared.add_engine_args(sp)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from hqa.artifacts.store import check_program_kwargs
    from hqa.jobs.compare import COMPARE_ARMS, arm_options, compare, compare_benchmarks, parse_vary
    from hqa.programs import build_program

    from hqa.jobs.budget import Budget

    engine = shared.engine_args(args)
    settings = shared.settings(args)
    budget = Budget.from_args(args, settings.lm)
    devs = tuple(d.strip() for d in args.dev.split(",") if d.strip())
    args.dev = devs[0] if devs else args.dev
    opts = options(args, "none")
    variants = parse_vary(args.vary) if args.vary else ()
    arms = tuple(a.strip() for a in args.arms.split(",")) if args.arms else ("none",) if variants else COMPARE_ARMS
    for dev in devs:
        for arm in arms:  # validate every arm on every benchmark before spending LM calls
            arm_options(replace(opts, dev=dev), arm).validate()
    for _, kwargs in variants:
        check_program_kwargs(args.program, {**opts.program_kwargs, **kwargs}, "--vary")
        build_program(args.program, **{**opts.program_kwargs, **kwargs})  # the constructor's own checks
    label = f"compare {opts.program}"
    out_dir = Path(args.out) if args.out else None
    if len(devs) > 1:  # one compare per benchmark, each with its own human library (HumanIQ §3)
        if variants:
            raise ConfigError("--vary runs on one --dev set; run one compare per benchmark")
        result = compare_benchmarks(settings, opts, devs, arms=arms, out_dir=out_dir, progress=True, configure=True,
                                    budget=budget, fresh=args.fresh, estimate=estimate_printer(args, settings, label),
                                    **engine)
        print(Path(result["table"]).read_text(encoding="utf-8"))
        print(f"summary: {result['table']}\ncsv: {result['csv']}")
        return 0
    result = compare(settings, opts, arms=arms, out_dir=out_dir, progress=True, variants=variants, configure=True,
                     budget=budget, fresh=args.fresh, estimate=estimate_printer(args, settings, label), **engine)
    print(Path(result["table"]).read_text(encoding="utf-8"))
    if variants:  # one row per program-kwargs arm, EM and F1 (the layout of SS-CoT Table 3)
        key = next(iter(variants[0][1]))
        print(f"| {key} | EM | F1 |\n|---|---|---|")
        for row in result["rows"]:
            print(f"| {row['arm']} | {row['em']:.2f} | {row['f1']:.2f} |")
        print()
    print(f"table: {result['table']}\ncsv: {result['csv']}\nplot: {result['plot']}\nmlflow run: {result['run_id']}")
    return 0

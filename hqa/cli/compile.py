"""``hqa compile``: compile a program with an optimizer, evaluate, save, track in MLflow (hqa.jobs.compile).
:func:`add_options` and :func:`options` are the arguments ``hqa compare`` shares with it."""

from __future__ import annotations

import argparse
import json

from hqa.cli import args as shared
from hqa.cli.output import estimate_printer
from hqa.cli.registry import OPTIMIZERS, LazyChoices
from hqa.errors import ConfigError


def add_arguments(sp: argparse.ArgumentParser) -> None:
    add_options(sp, with_optimizer=True)


def add_options(sp: argparse.ArgumentParser, with_optimizer: bool) -> None:
    """The options of ``hqa compile`` (``with_optimizer``) and ``hqa compare``: the program, the data, the optimizer's
    knobs and the budget."""
    shared.add_program_args(sp, compiling=True)
    if with_optimizer:
        sp.add_argument("--optimizer", default="dpp-human", choices=LazyChoices(OPTIMIZERS), metavar="OPTIMIZER",
                        help="how the demos are chosen, one of: %(choices)s")
        sp.add_argument("--name", help="artifact name (default <program>-<optimizer>)")
        sp.add_argument("--no-eval", action="store_true", help="skip the dev evaluation")
        sp.add_argument("--force", action="store_true",
                        help="replace a compiled program already saved under the same name (default: refuse)")
        sp.add_argument("--register", help="also register the MLflow model under this name (models:/NAME/N)")
        sp.add_argument("--alias", help="with --register: point this registry alias at the new version "
                                        "(models:/NAME@ALIAS)")
    sp.add_argument("--train", default="compmix/dev", help="dataset spec for training (e.g. compmix/dev)")
    sp.add_argument("--dev", default="humaniq-compmix", help="dataset spec for evaluation")
    sp.add_argument("--train-limit", type=int, default=20, help="most training questions used")
    sp.add_argument("--dev-limit", type=int, default=20, help="most evaluation questions used")
    sp.add_argument("--metric", default="recall", choices=["em", "f1", "recall", "hits1"],
                    help="the metric the optimizer maximises and the table reports")
    sp.add_argument("--k", type=int, default=3, help="number of few-shot demos")
    sp.add_argument("--threads", type=shared.at_least_one, default=1, help="questions answered at once")
    sp.add_argument("--seed", type=int, default=0, help="seed of the optimizer's random choices")
    sp.add_argument("--budget", type=int, help="GEPA: max metric calls (default: auto=light)")
    shared.add_budget_args(sp)
    sp.add_argument("--max-bootstrapped-demos", type=int, default=2,
                    help="bootstrap/mipro: most demos taken from the program's own successful traces")
    sp.add_argument("--max-labeled-demos", type=int, default=2,
                    help="bootstrap/mipro: most demos taken from labeled train examples (question → gold answer)")
    sp.add_argument("--exclude", help="dataset specs whose questions never become demos, besides --dev "
                                      "(comma-separated; 'eval' = every evaluation set)")
    sp.add_argument("--human-datasets", default="",
                    help="HumanIQ libraries that supply human demos (default: the --dev benchmark's own, as in "
                         "the paper; 'pooled' = all three; or a list of mintaka,qald,compmix)")


def options(args: argparse.Namespace, optimizer: str):
    """The :class:`hqa.optimize.compile.CompileOptions` the arguments of :func:`add_options` give, validated."""
    from hqa.optimize.compile import CompileOptions

    kwargs = shared.program_kwargs(args)
    return CompileOptions(program=args.program, optimizer=optimizer, train=args.train, dev=args.dev,
                          train_limit=args.train_limit, dev_limit=args.dev_limit, metric=args.metric, k=args.k,
                          threads=args.threads, seed=args.seed, program_kwargs=kwargs,
                          human_datasets=tuple(d.strip() for d in args.human_datasets.split(",") if d.strip()),
                          budget=args.budget,
                          max_bootstrapped_demos=args.max_bootstrapped_demos,
                          max_labeled_demos=args.max_labeled_demos,
                          exclude=tuple(d.strip() for d in (args.exclude or "").split(",") if d.strip()),
                          ).validate()


def run(args: argparse.Namespace) -> int:
    from hqa.artifacts.store import check_name
    from hqa.jobs.compile import compile_and_save

    settings = shared.settings(args)
    opts = options(args, args.optimizer)
    if args.alias and not args.register:
        raise ConfigError("--alias needs --register NAME (the registered model the alias belongs to)")
    if args.register:
        check_name(args.register)
    from hqa.jobs.budget import Budget

    budget = Budget.from_args(args, settings.lm)
    result = compile_and_save(settings, opts, name=args.name, evaluate_dev=not args.no_eval, progress=True,
                              register=args.register, configure=True, force=args.force, budget=budget,
                              estimate=estimate_printer(args, settings,
                                                        f"compile {opts.program} with {opts.optimizer}"))
    if args.alias and result.get("registered"):
        from hqa.tracking.registry import set_alias

        result["alias"] = set_alias(settings, args.register, str(result["registered"]).rsplit("/", 1)[1], args.alias)
    print(json.dumps(result, indent=2, default=str))
    return 0

"""``hqa train ranker`` (the learned answer ranker, :mod:`hqa.optimize.answer_ranker`) and ``hqa train reranker``
(the cross-encoder fine-tuned from the packaged MiniLM, :mod:`hqa.optimize.cross_encoder`)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from hqa.cli import args as shared


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("what", choices=["ranker", "reranker"],
                    help="ranker: the answer ranker for the configured reranker (the bi-encoder's ships in "
                         "hqa/data/ranker); reranker: the cross-encoder, into the model cache")
    sp.add_argument("--train", default="compmix/train", help="the questions it learns from")
    sp.add_argument("--dev", default="compmix/dev", help="ranker: the questions its confidence is calibrated on")
    sp.add_argument("--train-limit", type=int, default=None,
                    help="training questions: every answerable one, the rest evenly spaced (default: ranker 1200, "
                         "reranker 800)")
    sp.add_argument("--dev-limit", type=int, default=500,
                    help="ranker: the even sample of --dev that stands for all of it (its answerable questions "
                         "are added)")
    sp.add_argument("--target", type=float, default=0.85,
                    help="ranker: precision of answered answerable dev questions the threshold is chosen for")
    sp.add_argument("--target-all", type=float, default=0.7,
                    help="ranker: precision of answered questions of the dev sample the threshold is chosen for")
    sp.add_argument("--rounds", type=int, default=None, help="ranker: boosting rounds (150)")
    sp.add_argument("--epochs", type=int, default=None, help="reranker: passes over the training pairs (default 1)")
    sp.add_argument("--loss", default=None, help="reranker: bce (each pair labelled alone) or ranking (each "
                                                  "positive against its hard negatives) (default: bce)")
    sp.add_argument("--learning-rate", type=float, default=None, help="reranker: the optimizer's peak rate "
                                                                      "(default 5e-5)")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--out", help="where to write (default: ranker — the folder the configured reranker's arm is "
                                  "read from; reranker — the model cache)")
    sp.add_argument("--json", action="store_true", help="print what was written as JSON")


def run(args: argparse.Namespace) -> int:
    settings = shared.settings(args)
    command = "hqa train " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if sys.argv[1:2] == ["train"] else \
        f"hqa train {args.what}"
    if args.what == "ranker":
        from hqa.optimize.answer_ranker import RankerOptions, train

        opts = RankerOptions(train=args.train, dev=args.dev, train_limit=args.train_limit or 1200,
                             dev_limit=args.dev_limit, target=args.target, target_all=args.target_all,
                             seed=args.seed, out=args.out, command=command)
        if args.rounds is not None:
            opts.rounds = args.rounds
        meta = train(settings, opts)
    else:
        from hqa.optimize.cross_encoder import RerankerOptions, train

        opts = RerankerOptions(train=args.train, train_limit=args.train_limit or 800, seed=args.seed, out=args.out,
                               command=command)
        for name in ("epochs", "loss", "learning_rate"):
            if getattr(args, name) is not None:
                setattr(opts, name, getattr(args, name))
        meta = train(settings, opts)
    if args.json:
        print(json.dumps({k: v for k, v in meta.items() if k not in ("trained_on", "calibrated_on")}, indent=1))
    return 0

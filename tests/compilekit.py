"""Compile round trips shared by the round-trip tests: small constructor arguments per program, one compile case
(compmix/dev train, humaniq-compmix dev), and a program's answer under a demo-sensitive LM."""

from __future__ import annotations

from conftest import DemoSensitiveLM

from hqa.data.datasets import load_examples
from hqa.optimize.compile import CompileOptions, compile_program, exclude_overlap

QUESTION = "What is the capital of Gabon?"


def opts(**kw) -> CompileOptions:
    """Compile options of a small closedbook bootstrap (6 train, 3 dev questions); ``kw`` overrides any."""
    base = dict(program="closedbook", optimizer="bootstrap", train="compmix/dev", dev="humaniq-compmix",
                train_limit=6, dev_limit=3, metric="em", max_bootstrapped_demos=2)
    base.update(kw)
    return CompileOptions(**base)


# small constructor arguments so each forward is a handful of LM calls
KWARGS = {"hqa": {"max_iters": 2}, "latefusion": {"max_iters": 2}, "detllm": {"hops": 2}, "sscot": {"n_samples": 2}}


def answer(program, lm: DemoSensitiveLM, question: str = QUESTION) -> str:
    lm.reset()
    return program(question=question).answer


def compile_case(program: str, optimizer: str, metric: str, toolbox=None):
    opts = CompileOptions(program=program, optimizer=optimizer, train="compmix/dev", dev="humaniq-compmix",
                          train_limit=3, dev_limit=2, metric=metric, k=2, max_bootstrapped_demos=2,
                          max_labeled_demos=2, program_kwargs=KWARGS.get(program, {}))
    dev = load_examples(opts.dev, opts.dev_limit)
    train = exclude_overlap(load_examples(opts.train, opts.train_limit), dev)
    compiled, info = compile_program(opts, train, dev, toolbox)
    return opts, compiled, info

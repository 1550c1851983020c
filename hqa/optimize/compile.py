"""Compile programs with DSPy teleprompters, evaluate on dev, save the artifact, track everything in MLflow.

Optimizers:

* ``none`` — the uncompiled program (zero-shot), saved like any other so runs are comparable;
* ``labeled-human`` — k human solution processes (seeded random choice) as fixed demos of the agent's step
  predictor, and the human merge examples as demos of the merge predictor;
* ``dpp-human`` (and ``relevance-human``, ``diversity-human``, ``random-human``) — per-question selection of k human
  demos by :class:`~hqa.optimize.dpp_fewshot.DPPFewShot` (the HumanIQ RQ5 ablations);
* ``bootstrap`` / ``bootstrap-rs`` — DSPy BootstrapFewShot / BootstrapFewShotWithRandomSearch on the train split;
* ``mipro`` — MIPROv2 (auto="light");
* ``gepa`` — GEPA (auto="light") with a feedback metric, the configured LM as reflection LM;
* ``human+bootstrap`` — BootstrapFewShot with the labeled-human program as teacher.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field

from typing import Any

import dspy

from hqa.errors import ConfigError

OPTIMIZERS = ("none", "labeled-human", "dpp-human", "relevance-human", "diversity-human", "random-human",
              "bootstrap", "bootstrap-rs", "mipro", "gepa", "human+bootstrap")
HUMAN_PROGRAMS = ("hqa", "latefusion", "static", "detllm")
_DPP_MODES = {"dpp-human": "dpp", "relevance-human": "relevance", "diversity-human": "diversity",
              "random-human": "random"}


@dataclass
class CompileOptions:
    program: str
    optimizer: str = "none"
    train: str = "compmix/dev"
    dev: str = "compmix/test"
    train_limit: int | None = 20
    dev_limit: int | None = 20
    metric: str = "recall"
    k: int = 3
    human_datasets: tuple[str, ...] = ("mintaka", "qald", "compmix")
    max_bootstrapped_demos: int = 2
    max_labeled_demos: int = 2
    num_candidates: int = 4
    budget: int | None = None  # GEPA: max metric calls instead of auto="light" (which is ~400 rollouts)
    threads: int = 1
    seed: int = 0
    program_kwargs: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> "CompileOptions":
        from hqa.metrics import METRICS
        from hqa.programs import PROGRAMS

        if self.program not in PROGRAMS:
            raise ConfigError(f"unknown program {self.program!r}; choose one of: {', '.join(PROGRAMS)}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {self.optimizer!r}; choose one of: {', '.join(OPTIMIZERS)}")
        if "human" in self.optimizer and self.program not in HUMAN_PROGRAMS:
            raise ConfigError(f"human demonstrations map onto the predictors of {', '.join(HUMAN_PROGRAMS)}; "
                              f"use another optimizer for {self.program!r}")
        if self.optimizer in _DPP_MODES and self.program != "hqa":
            raise ConfigError("per-question DPP selection is implemented for the hqa agent (--program hqa)")
        if self.metric not in METRICS:
            raise ConfigError(f"unknown metric {self.metric!r}; choose one of: {', '.join(METRICS)}")
        unknown = set(self.human_datasets) - {"mintaka", "qald", "compmix"}
        if unknown or not self.human_datasets:
            raise ConfigError(f"human datasets must be among mintaka, qald, compmix; got {sorted(unknown) or 'none'}")
        if self.k <= 0:
            raise ConfigError("k must be positive")
        return self


def data_hash(examples: list) -> str:
    h = hashlib.sha256()
    for ex in examples:
        h.update(json.dumps({"id": ex.get("id"), "q": ex.question, "a": list(ex.get("answers") or [])},
                            sort_keys=True).encode())
    return h.hexdigest()[:16]


def load_split(spec: str, limit: int | None) -> list:
    from hqa.data.datasets import load_dataset

    return [r.to_example() for r in load_dataset(spec, limit=limit)]


def exclude_overlap(train: list, dev: list) -> list:
    """Train examples whose question also appears in dev are dropped (no leakage through demos)."""
    from hqa.data.datasets import question_key

    dev_keys = {question_key(ex.question) for ex in dev}
    return [ex for ex in train if question_key(ex.question) not in dev_keys]


# -- human demonstrations ----------------------------------------------------------------------------------------
def human_library(datasets: tuple[str, ...], variant: str = "full"):
    from hqa.data.human import load_human_library

    return load_human_library(datasets, variant=variant)


def merge_demos(datasets: tuple[str, ...]) -> list:
    from hqa.data.human import load_merge_examples

    return [ex for name in datasets for ex in load_merge_examples(name)]


def _exclude_questions(library: list, questions: list[str]) -> list:
    from hqa.data.datasets import question_key

    keys = {question_key(q) for q in questions}
    return [d for d in library if question_key(d.question) not in keys]


def human_hop_demos(demo, hops: int) -> dict[str, dspy.Example]:
    """Map one human solution process onto DETLLM's per-hop predictors, as far as its fields allow.

    Hop i takes the human's i-th WikiSearch input as ``search_query``, i-th GetWikidataID input as
    ``query_entity`` and i-th RunSparql input as ``sparql`` ("None" when the human ran fewer), the thought before
    the first of these as ``rationale``, and as ``context`` the observations of the steps before it; ``answer`` gets
    all observations and the human's answer.  A hop with neither a search nor an entity is not produced.
    """
    steps = [s for s in demo.steps if s.action]
    by_tool: dict[str, list] = {"search": [], "entity": [], "sparql": []}
    for i, s in enumerate(steps):
        kind = {"WikiSearch": "search", "WikiSearchSummary": "search", "GetWikidataID": "entity",
                "RunSparql": "sparql"}.get(s.action)
        if kind:
            by_tool[kind].append(i)

    def obs(upto: int) -> list[str]:
        return [f"[{'text' if s.action.startswith('Wiki') else 'sparql'}] {s.observation[:400]}"
                for s in steps[:upto] if s.observation]

    out: dict[str, dspy.Example] = {}
    for h in range(1, hops + 1):
        picks = {k: (v[h - 1] if len(v) >= h else None) for k, v in by_tool.items()}
        if picks["search"] is None and picks["entity"] is None:
            continue
        first = min(i for i in picks.values() if i is not None)
        out[f"hop{h}"] = dspy.Example(
            question=demo.question, context=obs(first), hop=h, rationale=steps[first].thought,
            search_query=steps[picks["search"]].action_input if picks["search"] is not None else demo.question,
            query_entity=steps[picks["entity"]].action_input if picks["entity"] is not None else "",
            sparql=steps[picks["sparql"]].action_input if picks["sparql"] is not None else "None",
            source=demo.source, demo_id=demo.id).with_inputs("question", "context", "hop")
    answer = demo.wikipedia_answer or demo.wikidata_answer
    if answer:
        out["answer"] = dspy.Example(question=demo.question, context=obs(len(steps)), answer=answer,
                                     source=demo.source, demo_id=demo.id).with_inputs("question", "context")
    return out


def apply_labeled_human(program, opts: CompileOptions, exclude: list[str]) -> dspy.Module:
    """Fixed human demos (seeded choice of k) on the step predictors, human merge examples on merge."""
    from hqa.programs.hqa_agent import human_react_demo

    rng = random.Random(opts.seed)
    program = program.deepcopy()
    merges = merge_demos(opts.human_datasets)
    merges = _exclude_questions(merges, exclude)
    variants = {"react": "full", "text_agent.react": "wikipedia", "kg_agent.react": "wikidata"}
    if opts.program == "detllm":
        lib = _exclude_questions(human_library(opts.human_datasets), exclude)
        chosen = rng.sample(lib, min(len(lib), max(opts.k * 3, opts.k)))
        for name, predictor in program.named_predictors():
            demos = [d for d in (human_hop_demos(demo, program.hops).get(name) for demo in chosen) if d is not None]
            predictor.demos = demos[: opts.k]
        return program
    for name, predictor in program.named_predictors():
        if name in variants:
            lib = _exclude_questions(human_library(opts.human_datasets, variants[name]), exclude)
            predictor.demos = [human_react_demo(d) for d in rng.sample(lib, min(opts.k, len(lib)))]
        elif name == "merge":
            predictor.demos = rng.sample(merges, min(opts.k, len(merges)))
    return program


def compile_program(opts: CompileOptions, train: list, dev: list) -> tuple[dspy.Module, dict[str, Any]]:
    """Compile a fresh program; returns (program, manifest fields describing how)."""
    from hqa.metrics import METRICS
    from hqa.programs import build_program

    opts.validate()
    metric = METRICS[opts.metric]
    student = build_program(opts.program, **opts.program_kwargs)
    info: dict[str, Any] = {"wrapper": None}
    dev_questions = [ex.question for ex in dev]
    o = opts.optimizer
    if o == "none":
        program = student
    elif o == "labeled-human":
        program = apply_labeled_human(student, opts, dev_questions)
    elif o in _DPP_MODES:
        from hqa.optimize.dpp_fewshot import DPPFewShot
        from hqa.programs.hqa_agent import human_react_demo

        base = apply_labeled_human(student, opts, dev_questions)  # merge demos stay fixed
        base.react.demos = []
        library = human_library(opts.human_datasets)
        tele = DPPFewShot(k=opts.k, mode=_DPP_MODES[o], seed=opts.seed, demo_builders={"react": human_react_demo})
        program = tele.compile(base, trainset=library)
        info["wrapper"] = "dpp"
    elif o == "bootstrap":
        tele = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=opts.max_bootstrapped_demos,
                                     max_labeled_demos=opts.max_labeled_demos, max_errors=len(train) + 1)
        program = tele.compile(student, trainset=train)
    elif o == "bootstrap-rs":
        tele = dspy.BootstrapFewShotWithRandomSearch(
            metric=metric, max_bootstrapped_demos=opts.max_bootstrapped_demos, max_labeled_demos=opts.max_labeled_demos,
            num_candidate_programs=opts.num_candidates, num_threads=opts.threads, max_errors=len(train) + 1)
        program = tele.compile(student, trainset=train)
    elif o == "human+bootstrap":
        teacher = apply_labeled_human(student, opts, dev_questions)
        teacher._compiled = True  # else BootstrapFewShot resets the teacher and replaces its human demos
        tele = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=opts.max_bootstrapped_demos,
                                     max_labeled_demos=opts.max_labeled_demos, max_errors=len(train) + 1)
        program = tele.compile(student, teacher=teacher, trainset=train)
    elif o == "mipro":
        tele = dspy.MIPROv2(metric=metric, auto="light", num_threads=opts.threads, seed=opts.seed,
                            max_bootstrapped_demos=opts.max_bootstrapped_demos,
                            max_labeled_demos=opts.max_labeled_demos, verbose=False)
        program = tele.compile(student, trainset=train, valset=dev or None)
    elif o == "gepa":
        budget = {"max_metric_calls": opts.budget} if opts.budget else {"auto": "light"}
        tele = dspy.GEPA(metric=gepa_metric(opts.metric), reflection_lm=dspy.settings.lm,
                         num_threads=opts.threads, seed=opts.seed, **budget)
        program = tele.compile(student, trainset=train, valset=dev or None)
    else:  # pragma: no cover - validate() guards this
        raise ConfigError(o)
    return program, info


def gepa_metric(name: str):
    """GEPA wants (gold, pred, trace, pred_name, pred_trace) and textual feedback."""
    from hqa.metrics import METRICS

    base = METRICS[name]

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        score = float(base(gold, pred))
        golds = ", ".join(gold.get("answers") or [])
        feedback = (f"Correct: '{pred.answer}' matches the gold answer." if score >= 1.0 else
                    f"The answer '{getattr(pred, 'answer', '')}' is wrong; the gold answer is: {golds}.")
        return dspy.Prediction(score=score, feedback=feedback)

    return metric

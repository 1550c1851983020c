"""Compile programs with DSPy teleprompters, evaluate on dev, save the artifact, track everything in MLflow.

Optimizers:

* ``none`` — the uncompiled program (zero-shot), saved like any other so runs are comparable;
* ``labeled-human`` — k human solution processes (seeded random choice) as fixed demos of the agent's step
  predictor, and the benchmark's human merge examples (all of them, as the authors' merge prompt) as demos of the
  merge predictor;
* ``dpp-human`` (and ``relevance-human``, ``diversity-human``, ``random-human``) — per-question selection of k human
  demos by :class:`DPPFewShot` (the HumanIQ RQ5 ablations), for every predictor a
  program declares human processes for (the agent's step, the late-fusion pipelines' steps);
* ``bootstrap`` / ``bootstrap-rs`` — DSPy BootstrapFewShot / BootstrapFewShotWithRandomSearch on the train split;
* ``mipro`` — MIPROv2 (auto="light");
* ``gepa`` — GEPA (auto="light") with a feedback metric, the configured LM as reflection LM;
* ``human+bootstrap`` — BootstrapFewShot with the labeled-human program as teacher.

The human libraries are the dev set's benchmark's own (HumanIQ §3: one library per benchmark, "to avoid training
leakage"): ``human_datasets=()`` resolves through :func:`hqa.data.human.resolve_human_datasets`; ``("pooled",)``
pools the three (an ablation).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

import dspy

from hqa.errors import ConfigError

if TYPE_CHECKING:
    from hqa.artifacts.dpp_program import DPPProgram
    from hqa.data.human import HumanDemo

_DPP_MODES = {"dpp-human": "dpp", "relevance-human": "relevance", "diversity-human": "diversity",
              "random-human": "random"}


def human_programs() -> tuple[str, ...]:
    """The programs that declare predictors human demonstrations map onto (``human_demo_builders``)."""
    from hqa.programs import PROGRAMS, program_class

    return tuple(name for name in PROGRAMS if hasattr(program_class(name), "human_demo_builders"))


def dpp_programs() -> tuple[str, ...]:
    """The programs per-question selection (DPP / relevance / diversity / random) serves (``per_question_demos``:
    the agent and the HumanIQ baselines; static's only human demos are the merge few-shots, which are fixed)."""
    from hqa.programs import PROGRAMS, program_class

    return tuple(name for name in PROGRAMS if program_class(name).per_question_demos)


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
    human_datasets: tuple[str, ...] = ()  # () = the dev set's benchmark's library; ("pooled",) = all three
    max_bootstrapped_demos: int = 2
    max_labeled_demos: int = 2
    num_candidates: int = 4
    budget: int | None = None  # GEPA: max metric calls instead of auto="light" (which is ~400 rollouts)
    threads: int = 1
    seed: int = 0
    program_kwargs: dict[str, Any] = field(default_factory=dict)
    # dataset specs whose questions must never reach a demo, beyond dev ("eval" = every evaluation set)
    exclude: tuple[str, ...] = ()

    def exclude_specs(self) -> tuple[str, ...]:
        """The dataset specs whose questions are kept out of the demos; ``eval`` = :func:`eval_specs`."""
        specs = [s for spec in self.exclude for s in (eval_specs() if spec == "eval" else (spec,))]
        return tuple(dict.fromkeys(specs))

    def validate(self) -> "CompileOptions":
        from hqa.scoring.metrics import METRICS
        from hqa.programs import canonical, program_class

        program_class(self.program)  # a clear error for an unknown name
        self.program = canonical(self.program)
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {self.optimizer!r}; choose one of: {', '.join(OPTIMIZERS)}")
        if "human" in self.optimizer and self.program not in human_programs():
            raise ConfigError(f"human demonstrations map onto the predictors of {', '.join(human_programs())}; "
                              f"use another optimizer for {self.program!r}")
        if self.metric not in METRICS:
            raise ConfigError(f"unknown metric {self.metric!r}; choose one of: {', '.join(METRICS)}")
        if self.optimizer in _DPP_MODES and self.program not in dpp_programs():
            raise ConfigError(f"per-question demo selection is implemented for {', '.join(dpp_programs())}")
        if "human" in self.optimizer and _needs_humaniq_library(self.program):
            self.libraries()  # a clear error for an unknown name or a benchmark without a library
        if self.k < 0:
            raise ConfigError("k must be >= 0")
        if not (0 <= self.max_bootstrapped_demos <= 100 and 0 <= self.max_labeled_demos <= 100):
            raise ConfigError("--max-bootstrapped-demos and --max-labeled-demos must be between 0 and 100")
        from hqa.data.datasets import DATASET_SPECS

        for spec in self.exclude_specs():
            if spec.split(":")[0] not in DATASET_SPECS:
                raise ConfigError(f"--exclude: unknown dataset {spec!r}; valid: eval, {', '.join(DATASET_SPECS)}")
        if self.train.split(":")[0] in self.exclude_specs():
            raise ConfigError(f"--exclude names the training set {self.train!r} itself")
        return self

    def libraries(self) -> tuple[str, ...]:
        """The HumanIQ libraries that supply this run's human demos (per benchmark by default)."""
        from hqa.data.human import resolve_human_datasets

        return resolve_human_datasets(self.human_datasets, self.dev)


def eval_specs() -> tuple[str, ...]:
    """Every evaluation set this machine can evaluate on (a mirror-only set absent here, with no mirror, cannot be:
    :data:`~hqa.data.datasets.MIRROR_ONLY_SETS`)."""
    from hqa.data.datasets import EVAL_SETS, MIRROR_ONLY_SETS
    from hqa.data.store import obtainable

    return tuple(s for s in EVAL_SETS if not (s in MIRROR_ONLY_SETS and not obtainable(MIRROR_ONLY_SETS[s])))


def data_hash(examples: list) -> str:
    """The checksum of a dataset's examples every record uses (:func:`hqa.tracking.record.dataset_checksum`)."""
    from hqa.tracking.record import dataset_checksum

    return dataset_checksum(examples)


def exclude_overlap(train: list, dev: list) -> list:
    """Train examples whose question also appears in dev (any examples or records with a ``question``) are dropped
    (no leakage through demos)."""
    return _exclude_questions(train, [ex.question for ex in dev])


def excluded_questions(specs: tuple[str, ...]) -> list:
    """Every record of these dataset specs (whole sets: a question must not leak from any part of them)."""
    from hqa.data.datasets import load_dataset

    return [r for spec in specs for r in load_dataset(spec.split(":")[0])]


# -- human demonstrations ----------------------------------------------------------------------------------------
def merge_demos(datasets: tuple[str, ...]) -> list:
    from hqa.data.human import load_merge_examples

    return [ex for name in datasets for ex in load_merge_examples(name)]


@functools.lru_cache(maxsize=None)
def _needs_humaniq_library(program: str) -> bool:
    """Whether some predictor of ``program`` takes its demos from a HumanIQ library (not from its own source); read
    from a default-built program once per name and process (every compare arm validates its options again)."""
    from hqa.programs import build_program

    return any(spec.library is None for spec in build_program(program).human_demo_builders().values())


def spec_library(spec, opts: CompileOptions, exclude: list[str]) -> list:
    """The demos one ``HumanDemoSpec`` draws from, without the questions of ``exclude`` (the eval set): a program's
    own library (also without every question of ``--exclude``'s sets, as its source is a benchmark), else the
    run's HumanIQ library of the spec's variant."""
    if spec.library:
        skip = list(exclude) + [r.question for r in excluded_questions(opts.exclude_specs())]
        return _exclude_questions(spec.library(), skip)
    from hqa.data.human import load_human_library

    return _exclude_questions(load_human_library(opts.libraries(), variant=spec.variant), exclude)


def _exclude_questions(library: list, questions: list[str]) -> list:
    from hqa.data.datasets import question_key

    keys = {question_key(q) for q in questions}
    return [d for d in library if question_key(d.question) not in keys]


def apply_labeled_human(program, opts: CompileOptions, exclude: list[str]) -> dspy.Module:
    """Fixed human demos (a seeded choice of k) on every predictor the program declares in
    ``human_demo_builders()``; questions in ``exclude`` (the eval set) never become demos, nor, for a program's own
    demo library (``HumanDemoSpec.library``), those of ``opts.exclude``."""
    rng = random.Random(opts.seed)
    program = program.deepcopy()
    specs = program.human_demo_builders()
    for name, predictor in program.named_predictors():
        spec = specs.get(name)
        if spec is None:
            continue
        if spec.variant == "merge":  # all of the benchmark's merge few-shots, in file order (HumanIQ §3)
            predictor.demos = _exclude_questions(merge_demos(opts.libraries()), exclude)
            continue
        lib = spec_library(spec, opts, exclude)
        chosen = rng.sample(lib, min(len(lib), opts.k * spec.pool))
        predictor.demos = [d for d in map(spec.build, chosen) if d is not None][: opts.k]
    return program


# -- the optimizers: name → recipe(student, opts, train, dev, metric, info) → compiled program ---------------------
Recipe = Callable[..., dspy.Module]
OPTIMIZERS: dict[str, Recipe] = {}


def optimizer(*names: str) -> Callable[[Recipe], Recipe]:
    def register(fn: Recipe) -> Recipe:
        for name in names:
            OPTIMIZERS[name] = fn
        return fn

    return register


def _questions(dev: list) -> list[str]:
    return [ex.question for ex in dev]


@optimizer("none")
def _none(student, opts, train, dev, metric, info):
    return student


@optimizer("labeled-human")
def _labeled_human(student, opts, train, dev, metric, info):
    return apply_labeled_human(student, opts, _questions(dev))


@optimizer(*_DPP_MODES)
def _dpp_human(student, opts, train, dev, metric, info):
    base = apply_labeled_human(student, opts, _questions(dev))  # merge demos stay fixed
    from hqa.artifacts.dpp_program import selected_predictors

    specs, selector = selected_predictors(base)
    for name, predictor in base.named_predictors():
        if name in specs:
            predictor.demos = []  # chosen per question instead
    tele = DPPFewShot(k=opts.k, mode=_DPP_MODES[opts.optimizer], seed=opts.seed, **selector)
    info["wrapper"] = "dpp"
    first = {spec.variant: spec for spec in specs.values()}  # one library per variant, eval questions left out
    library = [d for v in sorted(first) for d in spec_library(first[v], opts, _questions(dev))]
    return tele.compile(base, trainset=library)


class DPPFewShot(dspy.teleprompt.Teleprompter):
    """Compile a student into a :class:`DPPProgram` that selects ``k`` human demos per question.

    ``mode``: ``"dpp"`` (relevance × diversity, the HumanIQ method), ``"relevance"``, ``"diversity"`` or
    ``"random"`` (seeded by ``seed`` and the question).  ``embedder``: an embedding model name for
    :func:`hqa.retrievers.embedding.encoders.get_embedder` (default: the packaged MiniLM) or a callable ``texts -> array``.
    ``demo_builders`` maps a predictor name of the student (as in ``student.named_predictors()``) to a function
    turning a :class:`HumanDemo` into that predictor's demo; default :func:`default_demo_builders`.
    ``demo_variants`` maps a predictor name to the library variant it draws from (default ``full``).
    """

    def __init__(self, k: int = 3, mode: str = "dpp", seed: int = 0, **options: Any):
        from hqa.artifacts.dpp_program import check_selector

        super().__init__()
        check_selector(mode, k)
        # the DPPProgram's selector options (embedder, demo_builders, demo_variants), given to it as they are
        self.options = {"k": int(k), "mode": mode, "seed": int(seed), **options}

    def compile(self, student: dspy.Module, *, trainset: Sequence[HumanDemo], **kwargs) -> DPPProgram:
        from hqa.artifacts.dpp_program import DPPProgram, default_demo_builders
        from hqa.data.human import HumanDemo

        for i, item in enumerate(trainset):
            if not isinstance(item, (HumanDemo, dict)):
                raise ConfigError(f"DPPFewShot trainset item {i} is a {type(item).__name__}, not a HumanDemo")
        library = [HumanDemo.from_dict(d) if isinstance(d, dict) else d for d in trainset]
        builders = self.options.get("demo_builders")
        names = [name for name, _ in student.named_predictors()]
        if unknown := [b for b in (default_demo_builders() if builders is None else builders) if b not in names]:
            raise ConfigError(f"demo builders name predictors {unknown} that the student does not have; "
                              f"its predictors are {names}")
        program = DPPProgram(student.deepcopy(), library, **self.options)
        return program.prepare()


def _bootstrap(opts, metric, train):
    return dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=opts.max_bootstrapped_demos,
                                 max_labeled_demos=opts.max_labeled_demos, max_errors=len(train) + 1)


@optimizer("bootstrap")
def _bootstrap_fewshot(student, opts, train, dev, metric, info):
    return _bootstrap(opts, metric, train).compile(student, trainset=train)


@optimizer("bootstrap-rs")
def _bootstrap_rs(student, opts, train, dev, metric, info):
    tele = dspy.BootstrapFewShotWithRandomSearch(
        metric=metric, max_bootstrapped_demos=opts.max_bootstrapped_demos, max_labeled_demos=opts.max_labeled_demos,
        num_candidate_programs=opts.num_candidates, num_threads=opts.threads, max_errors=len(train) + 1)
    return tele.compile(student, trainset=train)


@optimizer("human+bootstrap")
def _human_bootstrap(student, opts, train, dev, metric, info):
    teacher = apply_labeled_human(student, opts, _questions(dev))
    teacher._compiled = True  # else BootstrapFewShot resets the teacher and replaces its human demos
    return _bootstrap(opts, metric, train).compile(student, teacher=teacher, trainset=train)


@optimizer("mipro")
def _mipro(student, opts, train, dev, metric, info):
    tele = dspy.MIPROv2(metric=metric, auto="light", num_threads=opts.threads, seed=opts.seed,
                        max_bootstrapped_demos=opts.max_bootstrapped_demos,
                        max_labeled_demos=opts.max_labeled_demos, verbose=False)
    return tele.compile(student, trainset=train, valset=dev or None)


@optimizer("gepa")
def _gepa(student, opts, train, dev, metric, info):
    budget = {"max_metric_calls": opts.budget} if opts.budget else {"auto": "light"}
    tele = dspy.GEPA(metric=gepa_metric(opts.metric), reflection_lm=dspy.settings.lm,
                     num_threads=opts.threads, seed=opts.seed, **budget)
    return tele.compile(student, trainset=train, valset=dev or None)


def compile_program(opts: CompileOptions, train: list, dev: list, toolbox: Any = None,
                    student: dspy.Module | None = None) -> tuple[dspy.Module, dict[str, Any]]:
    """Compile ``student`` (the uncompiled ``opts.program`` with ``opts.program_kwargs``, as the jobs open it through
    :func:`hqa.app.open_program`; None: a fresh one built here, given ``toolbox``) with the recipe registered for
    ``opts.optimizer``; returns (program, manifest fields describing how)."""
    from hqa.scoring.metrics import METRICS
    from hqa.programs import build_program

    opts.validate()
    if student is None:
        student = build_program(opts.program, toolbox, **opts.program_kwargs)
    info: dict[str, Any] = {"wrapper": None}
    from hqa.io.logs import library_chatter

    with library_chatter("dspy"):  # DSPy's optimizers print their progress and draw unlabelled bars
        program = OPTIMIZERS[opts.optimizer](student, opts, train, dev, METRICS[opts.metric], info)
    label_demo_ids(program, train)
    return program, info


def label_demo_ids(program: dspy.Module, train: list) -> None:
    """Give every compiled demo without an id the id of the training example it came from (a bootstrapped demo is
    rebuilt from the program's trace and loses the example's fields), matched by question; records then name
    each demo by id (:func:`hqa.lm.calls.demo_id`).  Human demos keep their library ids."""
    from hqa.data.datasets import question_key

    ids = {question_key(ex.question): str(ex.get("id")) for ex in train if ex.get("id") is not None}
    for _, predictor in program.named_predictors():
        for demo in predictor.demos:
            if hasattr(demo, "get") and not demo.get("demo_id") and not demo.get("id") and demo.get("question"):
                found = ids.get(question_key(str(demo.get("question"))))
                if found is not None:
                    demo["id"] = found


def gepa_metric(name: str):
    """GEPA wants (gold, pred, trace, pred_name, pred_trace) and textual feedback."""
    from hqa.scoring.metrics import METRICS

    base = METRICS[name]

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        score = float(base(gold, pred))
        golds = ", ".join(gold.get("answers") or [])
        feedback = (f"Correct: '{pred.answer}' matches the gold answer." if score >= 1.0 else
                    f"The answer '{getattr(pred, 'answer', '')}' is wrong; the gold answer is: {golds}.")
        return dspy.Prediction(score=score, feedback=feedback)

    return metric

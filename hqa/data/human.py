"""HumanIQ human solution processes as few-shot demonstrations.

The package ships the HumanIQ data (``hqa/data/humaniq/``, see ``ATTRIBUTION.md`` there):

* ``{mintaka,qald,compmix}.json`` — 20 / 19 / 20 complete human solution processes (variant ``"full"``);
* ``late_fusion/{dataset}_{wikipedia,wikidata}.json`` — the same traces cut down to one source
  (variants ``"wikipedia"`` and ``"wikidata"``);
* ``merge_few_shot_examples.json`` — few-shot text for the answer-merging step.

:func:`load_human_library` turns the trace files into :class:`HumanDemo` objects (the programs build their demos
from them, e.g. :func:`hqa.programs.humaniq.human_react_demo`); :func:`load_merge_examples` parses the merge
few-shots.

A demo's action sequence is always taken from its parsed trace.  The files' ``Action_Sequence`` field is not used:
in the Wikidata-only late-fusion files it was copied from the full traces and is stale for 35 of 59 records.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from hqa.data.traces import Step, parse_trace
from hqa.errors import ConfigError, DataError

logger = logging.getLogger(__name__)

DATASETS: tuple[str, ...] = ("mintaka", "qald", "compmix")
VARIANTS: tuple[str, ...] = ("full", "wikipedia", "wikidata")

#: ``--human-datasets`` value that pools the three libraries (an ablation: HumanIQ §3 keeps them apart)
POOLED = "pooled"

#: which HumanIQ library serves a benchmark (dataset spec name -> library): HumanIQ §3 keeps one library per
#: benchmark, against training leakage.  Every registered name of a benchmark maps to it: CompMix (UniHGKR's copy, the
#: authors' release, HumanIQ's list), Mintaka (every split and the dev excerpt), QALD-9-plus (DBpedia and Wikidata
#: gold); QALD-10 gets the QALD-9-plus library (the paper has no QALD-10).  tests/unit/data/test_benchmark_library.py
#: checks that every name of hqa.data.datasets.DATASET_SPECS is here or in :data:`NO_LIBRARY`.
BENCHMARK_LIBRARY: dict[str, str] = {
    "compmix/test": "compmix", "compmix/dev": "compmix", "compmix/train": "compmix", "humaniq-compmix": "compmix",
    "compmix-release/test": "compmix", "compmix-release/dev": "compmix", "compmix-release/train": "compmix",
    "mintaka": "mintaka", "mintaka/test": "mintaka", "mintaka/dev": "mintaka", "mintaka/train": "mintaka",
    "qald9plus": "qald", "qald9plus-wikidata": "qald", "qald9plus-wikidata/train": "qald", "qald10": "qald",
}
#: registered datasets of no HumanIQ benchmark: their questions get ``programs.human_library`` (with one warning)
NO_LIBRARY: tuple[str, ...] = ("bamboogle",)


@dataclass(frozen=True)
class HumanDemoSpec:
    """How one predictor of a program gets human demonstrations (a program's ``human_demo_builders()`` maps predictor
    names to these): ``variant`` — which human library (``full`` solution processes, their ``wikipedia`` /
    ``wikidata`` halves, or ``merge`` for the human merge examples, which are demos as they are); ``build`` — one
    human solution process → that predictor's demo, or None when the trace has nothing for it; ``pool`` — draw
    ``pool × k`` traces and keep the first ``k`` demos (for predictors only some traces can serve); ``library`` — a
    program's own demo source (e.g. SS-CoT's Bamboogle decompositions) used instead of the human library."""

    variant: str
    build: Callable[[Any], Any] | None = None
    pool: int = 1
    library: Callable[[], list] | None = None


def benchmark_library(spec: str) -> str | None:
    """The HumanIQ library of a dataset spec (``compmix/test:answerable`` -> ``compmix``), None when it has none."""
    return BENCHMARK_LIBRARY.get(str(spec).split(":")[0].strip())


def resolve_human_datasets(names: Sequence[str], dev: str) -> tuple[str, ...]:
    """The libraries that supply human demos for questions of the dataset spec ``dev``.

    Empty ``names`` (the default) is the benchmark's own library (HumanIQ §3, per-benchmark); ``("pooled",)`` all
    three; otherwise the named ones.  A benchmark without a library must name one (a clear error, nothing run)."""
    names = tuple(str(n).strip().lower() for n in names if str(n).strip())
    if not names:
        own = benchmark_library(dev)
        if own is None:
            raise ConfigError(f"{dev!r} has no HumanIQ library of its own; name one with --human-datasets "
                              f"({', '.join(DATASETS)} or {POOLED})")
        return (own,)
    if names == (POOLED,):
        return DATASETS
    return tuple(_check_names(names, "full"))

_MERGE_FILE = "merge_few_shot_examples.json"


# ------------------------------------------------------------------------------------------------- Trajectory text


def format_step(step: Step) -> str:
    """One step as the agent's trajectory text.

    A tool step is always the four lines ``Thought: …`` / ``Action: …`` / ``Action Input: …`` / ``Observation: …``
    (a line's value may be empty).  A step without an action (a closing thought) is the ``Thought:`` line alone.
    """
    thought = (step.thought or "").strip()
    if not step.action:
        return f"Thought: {thought}"
    return (
        f"Thought: {thought}\n"
        f"Action: {step.action.strip()}\n"
        f"Action Input: {(step.action_input or '').strip()}\n"
        f"Observation: {(step.observation or '').strip()}"
    )


def format_trajectory(steps: Iterable[Step]) -> str:
    """The agent's trajectory text: :func:`format_step` blocks separated by one blank line (``""`` for no steps)."""
    return "\n\n".join(format_step(s) for s in steps)


# ----------------------------------------------------------------------------------------------------------- Demos


@dataclass
class HumanDemo:
    """One human solution process, ready to become a few-shot demonstration."""

    id: str
    question: str
    dataset: str
    variant: str
    steps: list[Step] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    wikipedia_answer: str | None = None
    wikidata_answer: str | None = None
    response: str | None = None
    source: str = "human"

    # -- serialisation (used by DPPProgram.dump_state / load_state) ------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; :meth:`from_dict` inverts it."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HumanDemo:
        try:
            steps = [s if isinstance(s, Step) else Step(**s) for s in data.get("steps", [])]
            return cls(
                id=str(data["id"]),
                question=str(data["question"]),
                dataset=str(data["dataset"]),
                variant=str(data["variant"]),
                steps=steps,
                actions=[str(a) for a in data.get("actions", [s.action for s in steps if s.action])],
                wikipedia_answer=data.get("wikipedia_answer"),
                wikidata_answer=data.get("wikidata_answer"),
                response=data.get("response"),
                source=str(data.get("source", "human")),
            )
        except (KeyError, TypeError) as exc:
            raise DataError(f"malformed human demo record ({type(exc).__name__}: {exc})") from None


# --------------------------------------------------------------------------------------------------------- Loading


def _data_root(path: str | Path | None):
    if path is not None:
        return Path(path)
    return resources.files("hqa.data").joinpath("humaniq")


def _read_json(root, rel: str):
    node = root.joinpath(*rel.split("/"))
    where = str(node)
    try:
        text = node.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"human trace file not found: {where}") from None
    except OSError as exc:
        raise DataError(f"cannot read {where}: {exc.strerror or exc}") from None
    try:
        return json.loads(text), where
    except json.JSONDecodeError as exc:
        raise DataError(f"{where} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None


def _check_names(datasets: Sequence[str], variant: str) -> list[str]:
    if isinstance(datasets, str):
        datasets = [datasets]
    out = []
    for ds in datasets:
        name = str(ds).lower()
        if name not in DATASETS:
            raise ConfigError(f"unknown HumanIQ dataset {ds!r}; expected one of {', '.join(DATASETS)}")
        out.append(name)
    if variant not in VARIANTS:
        raise ConfigError(f"unknown HumanIQ trace variant {variant!r}; expected one of {', '.join(VARIANTS)}")
    return out


def _demo_from_record(record: Any, *, dataset: str, variant: str, index: int) -> HumanDemo:
    """Parse one record; raises ``ValueError`` with the reason when it is malformed."""
    if not isinstance(record, dict):
        raise ValueError(f"record is a {type(record).__name__}, not an object")
    question = record.get("Question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("missing or empty 'Question'")
    text = record.get("One_Shot")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("missing or empty 'One_Shot'")
    trace = parse_trace(text, templated=True, question=question.strip())
    if not trace.steps or not trace.actions:
        raise ValueError("'One_Shot' has no Thought/Action steps")
    demo_id = f"{dataset}:{index}" if variant == "full" else f"{dataset}_{variant}:{index}"
    return HumanDemo(
        id=demo_id,
        question=trace.question,
        dataset=dataset,
        variant=variant,
        steps=trace.steps,
        actions=list(trace.actions),
        wikipedia_answer=trace.wikipedia_answer,
        wikidata_answer=trace.wikidata_answer,
        response=trace.response,
    )


def load_human_library(
    datasets: Sequence[str] = DATASETS,
    variant: str = "full",
    path: str | Path | None = None,
    strict: bool = False,
) -> list[HumanDemo]:
    """Load the human solution processes of ``datasets`` in one ``variant``.

    ``path`` is a directory laid out like the shipped ``hqa/data/humaniq`` (``{dataset}.json`` and
    ``late_fusion/{dataset}_{variant}.json``); by default the shipped copies are read.  A malformed record (not an
    object, no ``Question`` or ``One_Shot``, no tool steps) is skipped with a warning naming the file and index, or
    raises :class:`~hqa.errors.DataError` when ``strict``.  A missing or unreadable file always raises.
    """
    names = _check_names(datasets, variant)
    root = _data_root(path)
    demos: list[HumanDemo] = []
    for ds in names:
        data, where = _read_json(root, f"{ds}.json" if variant == "full" else f"late_fusion/{ds}_{variant}.json")
        if not isinstance(data, list):
            raise DataError(f"{where}: expected a JSON list of records, found {type(data).__name__}")
        for i, record in enumerate(data):
            try:
                demo = _demo_from_record(record, dataset=ds, variant=variant, index=i)
            except ValueError as exc:
                msg = f"{where}: record {i}: {exc}; skipped"
                if strict:
                    raise DataError(msg.removesuffix("; skipped")) from None
                logger.warning(msg)
                continue
            if variant == "full" and isinstance(record.get("Action_Sequence"), str):
                declared = record["Action_Sequence"].split()
                if declared != demo.actions:
                    logger.warning("%s: record %d: Action_Sequence field differs from the parsed trace", where, i)
            demos.append(demo)
    return demos


# ------------------------------------------------------------------------------------------------- Merge few-shots

# Labels appear as "Wikipedia Answer:" and as "Wikipedia answer :" in the file.
_MERGE_LABELS = (
    ("question", r"Question"),
    ("wikipedia_answer", r"Wikipedia\s+answer"),
    ("wikidata_answer", r"Wikidata\s+answer"),
    ("internal_knowledge", r"Internal\s+Knowledge"),
    ("context", r"Context"),
    ("answer", r"Answer"),
)
_MERGE_LABEL_RE = re.compile(
    r"^[ \t]*(?:" + "|".join(f"(?P<{k}>{p})" for k, p in _MERGE_LABELS) + r")[ \t]*:", re.I | re.M
)


def parse_merge_block(block: str) -> dict[str, str]:
    """Parse one ``Question: … / Wikipedia answer: … / … / Answer: …`` block into a dict of stripped strings.

    Values are kept as written (``"None"`` stays the string ``"None"``, as the merge prompt shows it).
    """
    out: dict[str, str] = {}
    matches = list(_MERGE_LABEL_RE.finditer(block))
    for i, m in enumerate(matches):
        key = m.lastgroup
        end = matches[i + 1].start() if i + 1 < len(matches) else len(block)
        out[key] = block[m.end():end].strip()
    return out


def load_merge_examples(dataset: str, path: str | Path | None = None):
    """The human few-shots of the answer-merging step for ``dataset`` as ``dspy.Example`` objects.

    Fields: question, wikipedia_answer, wikidata_answer, internal_knowledge, context, answer, source="human",
    dataset, demo_id (``<dataset>_merge:<index>``, the id records name it by); inputs are the question, the three candidate answers and the context (the workflow response the
    final response generation reads, HumanIQ §3).
    """
    import dspy

    (ds,) = _check_names([dataset], "full")
    data, where = _read_json(_data_root(path), _MERGE_FILE)
    if not isinstance(data, dict) or not isinstance(data.get(ds), str):
        raise DataError(f"{where}: no few-shot text for dataset {ds!r}")
    blocks = [b for b in re.split(r"\n\s*\n(?=\s*Question\s*:)", data[ds]) if b.strip()]
    examples = []
    for i, block in enumerate(blocks):
        fields = parse_merge_block(block)
        missing = [k for k, _ in _MERGE_LABELS if not fields.get(k)]
        if missing:
            raise DataError(f"{where}: {ds} example {i}: missing {', '.join(missing)}")
        examples.append(
            dspy.Example(**fields, source="human", dataset=ds, demo_id=f"{ds}_merge:{i}").with_inputs(
                "question", "wikipedia_answer", "wikidata_answer", "internal_knowledge", "context"
            )
        )
    return examples


__all__ = ["BENCHMARK_LIBRARY", "DATASETS", "POOLED", "benchmark_library", "resolve_human_datasets", "VARIANTS",
           "HumanDemo", "format_step", "format_trajectory", "load_human_library", "load_merge_examples",
           "parse_merge_block"]

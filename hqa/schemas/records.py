"""Pydantic schemas (strict types, ``extra="forbid"``) of the files hqa reads back: a predictions row (one line of
``predictions.jsonl``, written by :func:`hqa.jobs.evaluate.run_one`) and a compiled program's ``manifest.json`` (written
by :func:`hqa.artifacts.store.save_artifact`).  A bad record is refused in one line naming the first bad field; the
callers keep the dicts they read (the schemas check, they do not convert)."""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError

from hqa.errors import DataError


class PredictionRow(BaseModel):
    """One answered question.  ``trace`` is checked to be a mapping only: its keys are :mod:`hqa.schemas.trace`'s."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: str
    question: str
    answer: str | None  # None: the program abstained or gave no answer (hqa.answering.presentation.prediction_fields)
    scores: dict[str, float]
    gold: list[str] = []
    gold_ids: list[str] = []
    dataset: str | None = None
    gold_entities: list = []
    decomposition: list | dict | str | None = None
    trace: dict = {}
    error: str | None = None
    degraded: str | None = None
    prompt_tokens: float = 0
    cached_prompt_tokens: float = 0  # of prompt_tokens, served from the provider's prefix cache
    completion_tokens: float = 0
    tool_calls: float = 0
    lm_calls: float = 0
    # issue 53: of the LM requests, those served by DSPy's cache and those sent again; replies that did not parse
    cached_lm_calls: float = 0
    retries: float = 0
    parse_failures: float = 0
    lm_prompts: list = []  # per LM request: {"tokens", "marks"} (hqa.lm.prefix_cache.PromptRecorder)
    seconds: float = 0
    abstained: bool = False  # selective answering (hqa.answering.selective)
    reason: str | None = None
    confidence: float | None = None
    candidates: list = []
    # the answer came after a failure: {"kind", "step", "error"} (hqa.answering.presentation.fallback_of)
    fallback: dict | None = None
    demos: dict[str, list[str]] = {}  # per predictor, the ids of the demos its prompts held for this question


class ArtifactManifest(BaseModel):
    """A compiled program's provenance; ``program_kwargs`` is checked against the program's arguments model by
    :func:`hqa.artifacts.store.check_program_kwargs`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    format: int
    program: str
    program_kwargs: dict
    program_sha256: str
    manifest_sha256: str | None = None  # hqa.artifacts.store.manifest_checksum; absent in earlier manifests
    name: str = ""
    created: str | None = None
    versions: dict[str, str] = {}
    wrapper: Literal["dpp"] | None = None
    optimizer: str | None = None
    options: dict = {}
    settings: dict = {}
    pack_version: str | None = None
    data: dict = {}
    metrics: dict = {}
    cost: dict = {}
    mlflow_run_id: str | None = None
    warnings: list = []
    record: dict = {}  # what the compile ran with (hqa.tracking.record.run_record)


def _type_names(annotation: Any) -> str:
    """``str | None`` → ``"str or null"``; a number field → ``"int or float"``."""
    members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    return " or ".join({type(None): "null", float: "int or float"}.get(m, getattr(m, "__name__", str(m)))
                       for m in (get_origin(x) or x for x in members))


def _problem(model: type[BaseModel], data: Any, describe) -> str | None:
    """The first thing ``model`` refuses in ``data`` as one phrase naming the field (``describe(field, location,
    input)`` words a wrong value), or None."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        key, loc = str(err["loc"][0]), tuple(err["loc"])
        if err["type"] == "missing":
            return f"lacks field {key!r}"
        if err["type"] == "extra_forbidden":
            return f"unknown field {key!r}"
        return describe(key, loc, err.get("input"))
    return None


def row_problem(row: Any) -> str | None:
    """What is wrong with a predictions row (one phrase naming the field), or None when it is well formed."""
    if not isinstance(row, dict):
        return f"a row must be a JSON object, got {type(row).__name__}"

    def describe(key: str, loc: tuple, value: Any) -> str:
        if key in ("gold", "gold_ids") and len(loc) == 2:
            return f"field {key!r} must be a list of strings"
        if key == "scores" and len(loc) == 2:
            return f"field 'scores.{loc[1]}' must be a number, got {type(value).__name__}"
        names = _type_names(PredictionRow.model_fields[key].annotation)
        return f"field {key!r} must be {names}, got {type(row[key]).__name__}"

    problem = _problem(PredictionRow, row, describe)
    return f"row {problem}" if problem and problem.startswith("lacks") else problem


def manifest_problem(manifest: dict) -> str | None:
    """What is wrong with a compiled program's manifest (one phrase naming the field), or None."""

    def describe(key: str, _loc: tuple, _value: Any) -> str:
        if key == "versions":
            return "field 'versions' must map package names to version strings"
        if key == "wrapper":
            return f"field 'wrapper' must be \"dpp\" or absent, got {manifest.get('wrapper')!r}"
        return f"field {key!r} has the wrong type ({type(manifest[key]).__name__})"

    return _problem(ArtifactManifest, manifest, describe)


def check_row(row: Any, where: str) -> dict:
    """``row`` if it is a well-formed predictions row (:class:`PredictionRow`); DataError naming the first bad field
    otherwise."""
    problem = row_problem(row)
    if problem:
        raise DataError(f"{where}: {problem}")
    return row

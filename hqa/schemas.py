"""Pydantic schemas (strict types, ``extra="forbid"``) of the files hqa reads back: a predictions row (one line of
``predictions.jsonl``, written by :func:`hqa.evaluate.run_one`) and a compiled program's ``manifest.json`` (written by
:func:`hqa.optimize.artifacts.save_artifact`).  A bad record is refused in one line naming the first bad field; the
callers keep the dicts they read (the schemas check, they do not convert)."""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError


class PredictionRow(BaseModel):
    """One answered question.  ``trace`` is checked to be a mapping only: its keys are :mod:`hqa.trace`'s."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: str
    question: str
    answer: str
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
    completion_tokens: float = 0
    tool_calls: float = 0
    lm_calls: float = 0
    seconds: float = 0
    abstained: bool = False  # selective answering (hqa.selective)
    reason: str | None = None
    candidates: list = []


class ArtifactManifest(BaseModel):
    """A compiled program's provenance; ``program_kwargs`` is checked against the program's constructor by
    :func:`hqa.optimize.artifacts.check_program_kwargs`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    format: int
    program: str
    program_kwargs: dict
    program_sha256: str
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


def _type_names(annotation: Any) -> str:
    """``str | None`` → ``"str or null"``; a number field → ``"int or float"``."""
    members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    names = []
    for member in members:
        member = get_origin(member) or member
        names.append({type(None): "null", float: "int or float"}.get(member, getattr(member, "__name__", str(member))))
    return " or ".join(names)


def _first_error(exc: ValidationError) -> tuple[str, tuple, Any]:
    err = exc.errors(include_url=False)[0]
    return err["type"], tuple(err["loc"]), err.get("input")


def row_problem(row: Any) -> str | None:
    """What is wrong with a predictions row (one phrase naming the field), or None when it is well formed."""
    if not isinstance(row, dict):
        return f"a row must be a JSON object, got {type(row).__name__}"
    try:
        PredictionRow.model_validate(row)
    except ValidationError as exc:
        kind, loc, value = _first_error(exc)
        key = str(loc[0])
        if kind == "missing":
            return f"row lacks field {key!r}"
        if kind == "extra_forbidden":
            return f"unknown field {key!r}"
        if key in ("gold", "gold_ids") and len(loc) == 2:
            return f"field {key!r} must be a list of strings"
        if key == "scores" and len(loc) == 2:
            return f"field 'scores.{loc[1]}' must be a number, got {type(value).__name__}"
        return (f"field {key!r} must be {_type_names(PredictionRow.model_fields[key].annotation)}, got "
                f"{type(row[key]).__name__}")
    return None


def manifest_problem(manifest: dict, where: str) -> str | None:
    """What is wrong with the compiled program's manifest read from ``where`` (one line naming the field), or
    None."""
    try:
        ArtifactManifest.model_validate(manifest)
    except ValidationError as exc:
        kind, loc, value = _first_error(exc)
        key = str(loc[0])
        if kind == "missing":
            return f"{where} lacks {key!r}"
        if kind == "extra_forbidden":
            return f"{where}: unknown field {key!r}"
        if key == "versions":
            return f"{where}: field 'versions' must map package names to version strings"
        if key == "wrapper":
            return f"{where}: field 'wrapper' must be \"dpp\" or absent, got {manifest.get('wrapper')!r}"
        return f"{where}: field {key!r} has the wrong type ({type(manifest[key]).__name__})"
    return None

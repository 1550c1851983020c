"""A program's arguments: one pydantic model per program class (``Program.Arguments``, declared beside the class),
the one place that names them and bounds them.

Every way a program gets arguments goes through its model: the constructor (keyword form, validated by
:meth:`hqa.programs.base.Program.take_arguments`), ``--program-kwargs`` and a compiled program's manifest
(:func:`hqa.artifacts.store.check_program_kwargs`), ``hqa serve``'s per-request ``options`` (the fields marked
:func:`runtime`; :func:`hqa.app.with_options`), and the settings: a field marked with a ``setting`` (``answer_mode``,
``choices``, ``abstain``) left unset is resolved from ``programs.*`` once, by :func:`hqa.app.open_program`
(:func:`resolve_settings`), so ``forward`` reads its arguments and never the settings.

Imports pydantic only (no DSPy): the CLI checks ``--program-kwargs`` before any program runs.
"""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hqa.errors import ConfigError

#: the largest whole number a constructor argument takes unless its field says less (a bound on work a manifest or a
#: command line can ask for)
MAX_INT = 10_000
#: the longest string argument
MAX_STR = 200
#: the answer modes of ``programs.answer_mode`` (``auto``: grounded for the embedded LM only)
ANSWER_MODES = ("auto", "grounded", "free")
#: selective answering (``programs.abstain``; ``auto``: on for the embedded LM only)
ABSTAIN = ("auto", "on", "off")
#: how grounded candidates are ranked (``programs.ranker`` for ``simple``): the learned ranker
#: (:mod:`hqa.answering.ranker`) or the hand-set weights (:mod:`hqa.answering.candidates`, an ablation)
RANKER_MODES = ("learned", "hand")


class ArgumentError(ConfigError, ValueError):
    """A program argument its model refuses (a ConfigError; also a ValueError, as constructors raised before)."""

    def __init__(self, name: str, problem: str, message: str):
        super().__init__(message)
        self.name, self.problem = name, problem


class Arguments(BaseModel):
    """The base of every program's arguments model: unknown names are refused, types are strict (a bool is no
    int, a string no number), every field has a default (a program is built with none given)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @classmethod
    def runtime_fields(cls) -> tuple[str, ...]:
        """The fields a serve request may set (values read at forward time, so a copy with other values is safe)."""
        return tuple(n for n, f in cls.model_fields.items() if _extra(f).get("runtime"))

    @classmethod
    def settings_fields(cls) -> dict[str, str]:
        """field -> the ``programs.*`` setting that decides it when left unset."""
        return {n: _extra(f)["setting"] for n, f in cls.model_fields.items() if _extra(f).get("setting")}


def arg(default: Any, *, low: float | None = None, high: float | None = None, runtime: bool = False,
        setting: str | None = None) -> Any:
    """A field of an arguments model: its default, its bounds (whole numbers: ``low`` default 1, or 0 when the
    default is 0, ``high`` default :data:`MAX_INT`; numbers 0..100; strings at most :data:`MAX_STR` characters),
    ``runtime``: a serve request may set it; ``setting``: the ``programs.*`` setting that decides it when unset."""
    extra = {k: v for k, v in (("runtime", runtime), ("setting", setting)) if v}
    kind = type(default)
    if kind is int:
        low = (0 if default == 0 else 1) if low is None else low
        return Field(default, ge=low, le=MAX_INT if high is None else high, json_schema_extra=extra)
    if kind is float:
        return Field(default, ge=0 if low is None else low, le=100 if high is None else high, allow_inf_nan=False,
                     json_schema_extra=extra)
    if kind is str:
        return Field(default, max_length=MAX_STR, json_schema_extra=extra)
    if default is None and (low is not None or high is not None):
        return Field(default, ge=low, le=high, json_schema_extra=extra)
    return Field(default, json_schema_extra=extra)


def _extra(field) -> dict:
    return field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}


def _shape(field) -> tuple[Any, Any, Any]:
    """(the field's type without None, its low bound or choices, its high bound)."""
    kind = field.annotation
    if get_origin(kind) in (Union, types.UnionType):
        kind = next(a for a in get_args(kind) if a is not type(None))
    if get_origin(kind) is Literal:
        return Literal, get_args(kind), None
    low = high = None
    for m in field.metadata:
        low = getattr(m, "ge", low)
        high = getattr(m, "le", getattr(m, "max_length", high))
    return kind, low, high


def option_spec(model: type[Arguments], name: str) -> tuple:
    """A field as ``(type, low, high)`` or ``(str, choices)``: how ``GET /v1/programs`` lists an option and MLflow
    declares its parameter."""
    kind, low, high = _shape(model.model_fields[name])
    if kind is Literal:
        return (str, tuple(low))
    return (kind, low, high) if kind in (int, float) else (kind,)


def problem(model: type[Arguments], name: str, value: Any) -> str:
    """What is wrong with ``value`` for field ``name`` of ``model``, as ``must be ..., got ...`` (the same words on
    every path: constructor, ``--program-kwargs``, manifest, serve option)."""
    kind, low, high = _shape(model.model_fields[name])
    got = type(value).__name__
    if kind is Literal:
        return f"must be one of {', '.join(map(str, low))}, got {value!r}"
    if kind is bool:
        return f"must be bool, got {got}"
    if kind is int:
        if not isinstance(value, int) or isinstance(value, bool):
            return f"must be int, got {got}"
        return f"must be between {low} and {high}, got {value}"
    if kind is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return f"must be a number, got {got}"
        return f"must be a finite number between {low} and {high}, got {value}"
    if kind is str:
        return f"must be str, got {got}" if not isinstance(value, str) else \
            f"must be at most {high} characters long, got {len(value)}"
    return f"must be a list of strings, got {value!r}"


def validate(model: type[Arguments], values: dict[str, Any], owner: str) -> dict[str, Any]:
    """``values`` checked by ``model`` (those given, as given; a tuple field's list made a tuple); ArgumentError for
    the first name the model does not know or value it refuses (``owner`` names the program in the message)."""
    for name in values:
        if name not in model.model_fields:
            known = ", ".join(model.model_fields) or "none"
            raise ArgumentError(name, "unknown", f"{owner}: unknown argument {name!r} (known: {known})")
    try:
        checked = model.model_validate(values)
    except ValidationError as exc:
        name = str(exc.errors()[0]["loc"][0])
        text = problem(model, name, values.get(name))
        raise ArgumentError(name, text, f"{owner}: {name} {text}") from None
    return {name: getattr(checked, name) for name in values}


def resolve_settings(model: type[Arguments], settings: Any, given: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``model`` a setting decides, for those ``given`` leaves unset (or ``auto``), resolved for the
    settings' LM: ``answer_mode`` made ``grounded``/``free``, ``abstain`` ``on``/``off``, ``choices`` a number,
    ``ranker`` ``learned``/``hand``."""
    from hqa.answering.grounded import resolve_answer_mode
    from hqa.answering.selective import resolve_abstain

    resolve = {"answer_mode": lambda v: resolve_answer_mode(v, settings),
               "choices": lambda v: settings.programs.choices if v is None else v,
               "abstain": lambda v: "on" if resolve_abstain(v, settings) else "off",
               "ranker": lambda v: settings.programs.ranker if v is None else v}
    return {name: resolve[setting](given.get(name)) for name, setting in model.settings_fields().items()
            if given.get(name) in (None, "auto")}


#: the ``programs.*`` settings fields shared by the programs that answer through them
ANSWER_MODE = Union[Literal[ANSWER_MODES], None]  # type: ignore[valid-type]
ABSTAIN_MODE = Union[Literal[ABSTAIN], None]  # type: ignore[valid-type]
RANKER_MODE = Union[Literal[RANKER_MODES], None]  # type: ignore[valid-type]


__all__ = ["ABSTAIN", "ABSTAIN_MODE", "ANSWER_MODE", "ANSWER_MODES", "RANKER_MODE", "RANKER_MODES", "ArgumentError",
           "Arguments", "MAX_INT",
           "arg", "option_spec", "problem", "resolve_settings", "validate"]

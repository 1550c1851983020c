"""A study file (``hqa study FILE``, TOML like ``hqa.toml``): programs (with program kwargs and compile arms),
datasets, LMs and seeds, validated by pydantic, and their expansion into cells (issue 54; docs/studies.md).

::

    [study]
    name = "three-methods"        # the folder artifacts/studies/<name> and the MLflow parent run
    threads = 8                   # questions in flight across all cells
    seeds = [0]
    baseline = "closedbook"       # hqa results --baseline for the study's table

    [[program]]
    name = "humaniq"              # an hqa program
    label = "humaniq"             # the row's name (default: the program's)
    kwargs = {}                   # constructor arguments (--program-kwargs)
    arms = ["none"]               # compile arms: none = uncompiled, else an hqa compile optimizer (optimizer@k)
    train = "compmix/train"       # a compile arm's training set
    datasets = ["mintaka/test"]   # only these of the study's datasets (default: all)

    [[dataset]]
    spec = "mintaka/test"         # a dataset spec, :answerable allowed
    limit = 200

    [[lm]]
    name = "gpt-4o-mini"
    provider = "openai"           # local | openai | openai_compatible
    model = "gpt-4o-mini"
    price_in = 0.15               # US dollars per 1M prompt tokens (else hqa/data/prices.json)
    price_out = 0.60              # per 1M completion tokens
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hqa.errors import ConfigError

__all__ = ["Cell", "DatasetSpec", "LMSpec", "ProgramSpec", "Study", "StudySection", "load_study", "parse_lm_spec"]

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.+=-]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StudySection(_Strict):
    name: str = Field(pattern=_NAME, max_length=80)
    description: str = ""
    threads: int = Field(default=4, ge=1, le=1024)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    baseline: str = ""
    max_lm_calls: int | None = Field(default=None, ge=1)
    max_cost: float | None = Field(default=None, gt=0)


class ProgramSpec(_Strict):
    name: str = Field(min_length=1)
    label: str = Field(default="", pattern=r"^$|" + _NAME[1:])
    kwargs: dict = Field(default_factory=dict)
    arms: list[str] = Field(default_factory=lambda: ["none"], min_length=1)
    train: str = "compmix/train"
    train_limit: int = Field(default=20, ge=1)
    datasets: list[str] = Field(default_factory=list)

    @property
    def row_label(self) -> str:
        return self.label or self.name


class DatasetSpec(_Strict):
    spec: str = Field(min_length=1)
    limit: int | None = Field(default=None, ge=1)


class LMSpec(_Strict):
    name: str = Field(pattern=_NAME, max_length=80)
    provider: Literal["local", "openai", "openai_compatible"] = "local"
    model: str = ""
    api_base: str = ""
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)
    price_in: float | None = Field(default=None, ge=0)  # US dollars per 1M prompt tokens
    price_out: float | None = Field(default=None, ge=0)  # per 1M completion tokens
    price_cached: float | None = Field(default=None, ge=0)  # per 1M prompt tokens served from the prefix cache

    @model_validator(mode="after")
    def _remote_needs_model(self):
        if self.provider != "local" and not self.model:
            raise ValueError(f"lm {self.name!r}: provider {self.provider} needs a model")
        if self.provider == "openai_compatible" and not self.api_base:
            raise ValueError(f"lm {self.name!r}: provider openai_compatible needs an api_base")
        if (self.price_in is None) != (self.price_out is None):
            raise ValueError(f"lm {self.name!r}: give both price_in and price_out, or neither")
        return self

    def settings_overrides(self) -> dict:
        """The :func:`hqa.config.load_settings` overrides (``section_key``) this LM sets."""
        out = {"lm_provider": self.provider, "lm_model": self.model or None, "lm_api_base": self.api_base or None,
               "lm_temperature": self.temperature, "lm_max_tokens": self.max_tokens}
        return {k: v for k, v in out.items() if v is not None}


class Study(_Strict):
    study: StudySection
    program: list[ProgramSpec] = Field(min_length=1)
    dataset: list[DatasetSpec] = Field(min_length=1)
    lm: list[LMSpec] = Field(default_factory=lambda: [LMSpec(name="embedded")], min_length=1)

    @field_validator("lm")
    @classmethod
    def _unique_lms(cls, lms: list[LMSpec]) -> list[LMSpec]:
        names = [lm.name for lm in lms]
        if len(set(names)) != len(names):
            raise ValueError(f"lm names must be unique, got {names}")
        return lms

    @model_validator(mode="after")
    def _known_datasets(self):
        specs = {d.spec for d in self.dataset}
        for p in self.program:
            unknown = [d for d in p.datasets if d not in specs]
            if unknown:
                raise ValueError(f"program {p.row_label!r} names datasets that are not [[dataset]] entries: "
                                 f"{', '.join(unknown)}")
        return self

    def cells(self, limit: int | None = None, lms: list[LMSpec] | None = None) -> list["Cell"]:
        """Every (program, arm, dataset, LM, seed), in file order; ``limit`` caps every dataset's, ``lms`` replaces
        the file's LMs (the command line's ``--limit`` / ``--lm``)."""
        out, seen = [], set()
        for p in self.program:
            for arm in p.arms:
                for d in self.dataset:
                    if p.datasets and d.spec not in p.datasets:
                        continue
                    n = min(x for x in (d.limit, limit) if x is not None) if (d.limit or limit) else None
                    for lm in lms or self.lm:
                        for seed in self.study.seeds:
                            cell = Cell(program=p, arm=arm, dataset=d.spec, limit=n, lm=lm, seed=seed)
                            if cell.id in seen:
                                raise ConfigError(f"study {self.study.name}: two cells are both {cell.id} (give "
                                                  "the programs distinct labels)")
                            seen.add(cell.id)
                            out.append(cell)
        return out


class Cell(_Strict):
    """One run of a study: a program (with its kwargs) under one compile arm on one dataset with one LM and seed."""

    program: ProgramSpec
    arm: str
    dataset: str
    limit: int | None
    lm: LMSpec
    seed: int

    @property
    def id(self) -> str:
        """The cell's folder name: label, arm, dataset (and n), LM and seed, outside ``A-Za-z0-9_.+=-`` made ``_``."""
        n = f"-n{self.limit}" if self.limit else ""
        raw = f"{self.program.row_label}.{self.arm}.{self.dataset}{n}.{self.lm.name}.s{self.seed}"
        return re.sub(r"[^A-Za-z0-9_.+=-]+", "_", raw)

    @property
    def compiled(self) -> bool:
        return self.arm != "none"


def parse_lm_spec(text: str) -> LMSpec:
    """``--lm``'s value as one LM: ``local``, ``openai:MODEL`` or ``openai_compatible:MODEL@URL``."""
    provider, _, rest = str(text).partition(":")
    model, _, api_base = rest.partition("@")
    try:
        name = re.sub(r"[^A-Za-z0-9_.+=-]+", "_", model or provider) or provider
        return LMSpec(name=name, provider=provider, model=model, api_base=api_base)
    except ValidationError as exc:
        raise ConfigError(f"--lm {text!r}: {_first(exc)} (local, openai:MODEL or openai_compatible:MODEL@URL)") from None


def _first(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    return f"{where + ': ' if where else ''}{err.get('msg')}"


def load_study(path: Path) -> Study:
    """The study file at ``path``, validated (one ConfigError line naming the file and the field otherwise)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read study file {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"study file {path} is not TOML: {exc}") from None
    try:
        return Study.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"study file {path}: {_first(exc)}") from None


def cell_kwargs_json(kwargs: dict) -> str:
    return json.dumps(kwargs, sort_keys=True, separators=(", ", ": "))

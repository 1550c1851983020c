"""The question-answering programs, one seed system per module, by CLI name."""

from __future__ import annotations

from typing import Any, Callable

import dspy


def _simple(**kw: Any) -> dspy.Module:
    from hqa.programs.simple import SimpleHybrid

    return SimpleHybrid(**kw)


def _closedbook(**kw: Any) -> dspy.Module:
    from hqa.programs.closedbook import ClosedBook

    return ClosedBook(cot=False, **kw)


def _cot(**kw: Any) -> dspy.Module:
    from hqa.programs.closedbook import ClosedBook

    return ClosedBook(cot=True, **kw)


def _hqa(**kw: Any) -> dspy.Module:
    from hqa.programs.hqa_agent import HQAAgent

    return HQAAgent(**kw)


def _static(**kw: Any) -> dspy.Module:
    from hqa.programs.static import StaticPipeline

    return StaticPipeline(**kw)


def _latefusion(**kw: Any) -> dspy.Module:
    from hqa.programs.latefusion import LateFusion

    return LateFusion(**kw)


def _detllm(**kw: Any) -> dspy.Module:
    from hqa.programs.detllm import DETLLM

    return DETLLM(**kw)


def _sscot(**kw: Any) -> dspy.Module:
    from hqa.programs.sscot import SemiStructuredCoT

    return SemiStructuredCoT(**kw)


PROGRAMS: dict[str, Callable[..., dspy.Module]] = {
    "simple": _simple,
    "closedbook": _closedbook,
    "cot": _cot,
    "hqa": _hqa,
    "static": _static,
    "latefusion": _latefusion,
    "detllm": _detllm,
    "sscot": _sscot,
}

# which programs need retrieval (a toolbox); the others run on the LM alone
NEEDS_TOOLBOX = {"simple", "hqa", "static", "latefusion", "detllm", "sscot"}
LM_WRITES_SPARQL = NEEDS_TOOLBOX - {"simple"}  # simple's one hop runs only the queries code builds


def build_program(name: str, **kwargs: Any) -> dspy.Module:
    from hqa.errors import ConfigError

    if name not in PROGRAMS:
        raise ConfigError(f"unknown program {name!r}; choose one of: {', '.join(PROGRAMS)}")
    return PROGRAMS[name](**kwargs)

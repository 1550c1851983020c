"""The question-answering programs, one seed system per module, by CLI name.

A program's metadata is declared once, on its class (:class:`hqa.programs.base.Program`); its parts (the retrievers' toolbox) are
given to its constructor, never looked up while it answers.  :data:`PROGRAMS` only maps a CLI name to the class
(imported when first used, so naming the programs stays cheap).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import dspy

    from hqa.programs.base import Program

#: CLI name -> "module:Class"
PROGRAMS: dict[str, str] = {
    "simple": "hqa.programs.simple:SimpleHybrid",
    "closedbook": "hqa.programs.closedbook:ClosedBook",
    "cot": "hqa.programs.closedbook:ClosedBook",
    "humaniq": "hqa.programs.humaniq:HumanIQAgent",
    "static": "hqa.programs.static:StaticPipeline",
    "latefusion": "hqa.programs.latefusion:LateFusion",
    "detllm": "hqa.programs.detllm:DETLLM",
    "sscot": "hqa.programs.sscot:SemiStructuredCoT",
}
#: earlier names that keep working, with one deprecation line on stderr
ALIASES = {"hqa": "humaniq"}
_warned: set[str] = set()


def canonical(name: str) -> str:
    """``name`` with a deprecated alias replaced (one line on stderr, once per process)."""
    new = ALIASES.get(name)
    if new is None:
        return name
    if name not in _warned:
        _warned.add(name)
        print(f"hqa: program {name!r} is now called {new!r}; {name!r} keeps working for now", file=sys.stderr)
    return new


def program_class(name: str) -> type["Program"]:
    """The class of program ``name`` (an alias is accepted); ConfigError for an unknown name."""
    from hqa.errors import ConfigError
    from hqa.registry import resolve

    name = canonical(name)
    if name not in PROGRAMS:
        raise ConfigError(f"unknown program {name!r}; choose one of: {', '.join(PROGRAMS)}")
    return resolve(PROGRAMS[name])


def build_program(name: str, toolbox: Any = None, **kwargs: Any) -> "dspy.Module":
    """Program ``name`` with ``kwargs`` (checked by its arguments model, :mod:`hqa.programs.arguments`), given
    ``toolbox`` when its class needs one."""
    cls = program_class(name)
    parts = {"toolbox": toolbox} if cls.needs_toolbox else {}
    return cls(**cls.fixed_kwargs.get(canonical(name), {}), **parts, **kwargs)

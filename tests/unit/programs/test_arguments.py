"""A program's arguments live in one pydantic model (``Program.Arguments``, :mod:`hqa.programs.arguments`): the
constructor, ``--program-kwargs`` / a manifest (``check_program_kwargs``) and serve's per-request options
(``with_options``, ``GET /v1/programs``) all read it; the settings resolve into the arguments when a program is
opened, and ``forward`` never reads the settings (issue 37)."""

from __future__ import annotations

import inspect
import sys
from argparse import Namespace

import dspy
import pytest
from golden_programs import ARMS, QUESTIONS, open_arm, settings_at
from lmkit import ScriptLM

from hqa.app import _base, runtime_options, with_options
from hqa.artifacts.store import check_program_kwargs
from hqa.errors import ArtifactError, ConfigError
from hqa.programs import PROGRAMS, program_class
from hqa.programs.arguments import ArgumentError, arg
from hqa.programs.simple import SimpleArguments, SimpleHybrid


def refusals(kwargs: dict) -> list[str]:
    """The message of each path refusing ``kwargs`` for ``simple``: constructor, --program-kwargs, manifest, serve."""
    from hqa.cli.args import program_kwargs

    out = []
    with pytest.raises(ArgumentError) as built:
        SimpleHybrid(**kwargs)
    out.append(str(built.value))
    with pytest.raises(ArtifactError) as cli:
        program_kwargs(Namespace(program="simple", load=None, program_kwargs=__import__("json").dumps(kwargs)))
    out.append(str(cli.value))
    with pytest.raises(ArtifactError) as manifest:
        check_program_kwargs("simple", kwargs, "manifest.json")
    out.append(str(manifest.value))
    with pytest.raises(ConfigError) as served:
        with_options(SimpleHybrid(), kwargs)
    out.append(str(served.value))
    return out


@pytest.mark.parametrize("kwargs,problem", [
    ({"k": 0}, "k' must be between 1 and 50, got 0"),
    ({"k": "3"}, "k' must be int, got str"),
    ({"memory": "sometimes"}, "memory' must be one of always, fallback, got 'sometimes'"),
])
def test_constructor_manifest_and_serve_options_refuse_with_the_models_words(kwargs, problem):
    built, cli, manifest, served = refusals(kwargs)
    name, _, text = problem.partition("' ")
    assert built == f"SimpleHybrid: {name} {text}"
    assert cli == f"--program-kwargs: field 'program_kwargs.{name}' {text}"
    assert manifest == f"manifest.json: field 'program_kwargs.{name}' {text}"
    assert served == f"option '{name}' {text}"


def test_a_bound_changed_in_the_model_is_the_bound_of_every_path(monkeypatch):
    class Tighter(SimpleArguments):
        k: int = arg(6, high=7, runtime=True)

    monkeypatch.setattr(SimpleHybrid, "Arguments", Tighter)
    messages = refusals({"k": 8})
    assert all(m.endswith("must be between 1 and 7, got 8") for m in messages), messages
    assert runtime_options(SimpleHybrid())["k"] == (int, 1, 7)  # what GET /v1/programs lists
    assert SimpleHybrid(k=7).k == 7 and with_options(SimpleHybrid(), {"k": 7}).k == 7
    check_program_kwargs("simple", {"k": 7}, "manifest.json")


def test_unknown_names_are_refused_by_every_path():
    with pytest.raises(TypeError, match="'hops'"):  # the keyword form: the signature is the model's (below)
        SimpleHybrid(hops=3)
    with pytest.raises(ArtifactError, match="unknown field 'program_kwargs.hops' for program 'simple'"):
        check_program_kwargs("simple", {"hops": 3}, "manifest.json")
    with pytest.raises(ConfigError, match="'hops' is not an option of program SimpleHybrid"):
        with_options(SimpleHybrid(), {"hops": 3})
    with pytest.raises(ArtifactError, match="unknown field 'program_kwargs.cot' for program 'cot'"):
        check_program_kwargs("cot", {"cot": False}, "manifest.json")  # the CLI name fixes it


@pytest.mark.parametrize("name", sorted(set(PROGRAMS) - {"cot"}))
def test_the_keyword_form_of_each_constructor_is_its_model(name):
    """The constructor keeps its keyword form (tests and saved manifests call it so): the same names and defaults
    as its model, which validates them."""
    cls = program_class(name)
    params = {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items()
              if n not in ("self", "toolbox")}
    fields = {n: f.default for n, f in cls.Arguments.model_fields.items()}
    assert params == fields


class RecordingSettings:
    """The toolbox's settings, recording every read made from a program's or the answering policy's code."""

    WATCHED = ("hqa.programs", "hqa.answering", "hqa.artifacts.dpp_program")

    def __init__(self, inner):
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "reads", [])

    def __getattr__(self, name):
        caller = sys._getframe(1)
        module = caller.f_globals.get("__name__", "")
        if module.startswith(self.WATCHED):
            self.reads.append(f"{module}:{caller.f_lineno} settings.{name}")
        return getattr(self._inner, name)


@pytest.mark.parametrize("arm", [a for a in ARMS if a[1] not in ("closedbook", "cot")], ids=lambda a: a[0])
def test_forward_reads_no_settings(arm, built_pack):
    _, program, kwargs, overrides = arm
    prog = open_arm(program, kwargs, settings_at(built_pack, **overrides))
    toolbox = _base(prog).toolbox
    recorder = RecordingSettings(toolbox.settings)
    toolbox.settings = recorder  # after construction: what forward reads from now on is recorded
    lm = ScriptLM()
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = prog(question=QUESTIONS[0])
    assert pred.answer is not None
    assert recorder.reads == []

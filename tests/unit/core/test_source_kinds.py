"""The source kinds' one lazy registry (hqa/registry.py ``SOURCE_KINDS``): every kind it names imports and builds by
name, the settings and ``hqa --kg`` accept exactly its names, and the toolbox builds its kg / text / linker parts
through the configured kind's builder (no if-chain over the kinds beside it); one resolver serves every registry."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from hqa import registry
from hqa.config import SECTIONS, load_settings
from hqa.errors import ConfigError
from hqa.registry import SOURCE_KINDS, kind_names, source_kind
from hqa.toolbox import KGKind, LinkerKind, TextKind, Toolbox

PROTOCOLS = {"kg": KGKind, "text": TextKind, "linker": LinkerKind}
#: the keys a kind needs set beside it (hqa.config.REQUIRED)
NEEDS = {("kg", "sparql"): {"endpoint": "http://127.0.0.1:9/sparql"}, ("text", "jsonl"): {"path": "corpus.jsonl"}}


def settings(**overrides):
    return load_settings(Path("/nonexistent-hqa.toml"), environ={}, **overrides)


def test_every_kind_the_registry_names_is_built_by_name():
    assert set(SOURCE_KINDS) == set(PROTOCOLS)
    for source, kinds in SOURCE_KINDS.items():
        assert kinds, source
        for name in kinds:
            built = source_kind(source, name)  # imports "module:Class" and builds it
            assert isinstance(built, PROTOCOLS[source]), f"{source}.kind {name}: {kinds[name]} is no {source} kind"
            assert isinstance(built.local, bool), f"{source}.kind {name}"
        assert len(set(kinds.values())) == len(kinds), f"one builder per {source} kind"


def test_the_settings_and_the_cli_accept_exactly_the_registry_names():
    from hqa.cli.entry import build_parser

    for source in SOURCE_KINDS:
        field = SECTIONS[source].__pydantic_fields__["kind"]
        assert typing.get_args(field.annotation) == kind_names(source), source
        assert field.default == kind_names(source)[0], f"{source}: the registry lists the default kind first"
        for name in kind_names(source):
            extra = {f"{source}_{k}": v for k, v in NEEDS.get((source, name), {}).items()}
            assert getattr(settings(**{f"{source}_kind": name}, **extra), source).kind == name
        expected = " or ".join(", ".join(map(repr, kind_names(source))).rsplit(", ", 1))
        with pytest.raises(ConfigError) as err:  # the one line it always was
            settings(**{f"{source}_kind": "nope"})
        assert str(err.value) == f"config {source}.kind: 'nope' is not one of {expected}"
    parser = build_parser()
    for name in kind_names("kg"):
        assert parser.parse_args(["ask", "--kg", name, "q"]).kg == name
    with pytest.raises(SystemExit):
        parser.parse_args(["ask", "--kg", "nope", "q"])


def test_a_kind_the_registry_lacks_is_one_clear_error():
    s = settings()
    s.text.kind = "nope"  # past validation (settings edited in code)
    with pytest.raises(ConfigError, match=r"^unknown text.kind 'nope'; choose one of: pack, jsonl, wikipedia$"):
        _ = Toolbox(s).dense


# builders standing in for the registered ones: each part says which builder made it
class FakeKG:
    local = False

    def backend(self, tb):
        return ("kg", tb)


class FakeText:
    local = False
    checked: list = []

    def store(self, tb):
        return None

    def passages(self, tb):
        return [{"title": "fake", "text": "from the fake kind"}]

    def dense(self, tb):
        return ("dense", tb.passages)

    def pages(self, tb):
        return ("pages", tb.dense)

    def check(self, tb):
        self.checked.append(tb)


class FakeLinker:
    local = False

    def linker(self, tb, similarity):
        return ("linker", callable(similarity))


class Pinged:
    def ping(self):
        pass


def test_the_toolbox_builds_each_source_through_the_configured_kinds_builder(monkeypatch):
    for source, fake in (("kg", FakeKG), ("text", FakeText), ("linker", FakeLinker)):
        configured = getattr(settings(), source).kind
        monkeypatch.setitem(SOURCE_KINDS[source], configured, f"{__name__}:{fake.__name__}")
    tb = Toolbox(settings())
    assert tb.sparql == ("kg", tb)
    assert tb.passages == FakeText().passages(tb) and tb.dense == ("dense", tb.passages)
    assert tb.agent_pages == ("pages", tb.dense) and tb.text_world is None
    assert tb.linker.inner == ("linker", True)  # the toolbox's guard around what the kind built
    checked = Toolbox(settings(), sparql=Pinged())
    checked.check()  # no kind is local: neither the pack nor a world is opened
    assert FakeText.checked == [checked] and "manifest" not in checked.built()


def test_one_resolver_serves_every_registry():
    import hqa.cli.registry as cli_registry
    from hqa.programs import PROGRAMS, program_class

    assert cli_registry.resolve is registry.resolve
    assert program_class("detllm") is registry.resolve(PROGRAMS["detllm"])
    assert registry.resolve("hqa.registry") is registry
    assert registry.resolve(f"{__name__}:FakeText.passages") is FakeText.passages  # a dotted attribute (a saved
    # DPP demo builder's "module:Class.method")

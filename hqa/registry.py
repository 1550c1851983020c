"""hqa's one registry style, and the source kinds.

A registry maps a name to a ``"module:attr"`` string; :func:`resolve` imports the module when the name is first used,
so listing or checking names imports nothing (:data:`hqa.programs.PROGRAMS`, :mod:`hqa.cli.registry`,
:data:`SOURCE_KINDS`).  The settings accept exactly the kinds :data:`SOURCE_KINDS` names; this module imports nothing
of hqa but its errors, so the settings (the lowest layer that reads it) can take the names from here.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: source (a settings section) -> kind name (its ``kind`` value) -> "module:Class" of the kind's builder; the first
#: kind of each source is its default
SOURCE_KINDS: dict[str, dict[str, str]] = {
    "kg": {  # where SPARQL goes
        "oxigraph": "hqa.toolbox:KGOxigraph",  # the embedded store of the pack or a world
        "sparql": "hqa.toolbox:KGSparql",  # any SPARQL 1.1 HTTP endpoint
    },
    "text": {  # where passages come from
        "pack": "hqa.toolbox:TextPack",  # the pack's passages, or a world's own passage store
        "jsonl": "hqa.toolbox:TextJsonl",  # a user's {"title", "text"} JSONL corpus
        "wikipedia": "hqa.toolbox:TextWikipedia",  # any MediaWiki Action API
    },
    "linker": {  # entity linking
        "pack": "hqa.toolbox:LinkerPack",  # the pack's (or a world's) labels
        "wikidata": "hqa.toolbox:LinkerWikidata",  # the Wikibase API
        "sparql": "hqa.toolbox:LinkerSparql",  # the configured KG's labels
    },
}


def resolve(ref: str) -> Any:
    """The object a ``"module:attr"`` string names (``attr`` may be dotted, ``"Class.method"``; the module itself
    for ``"module"``), imported now."""
    module, _, attr = ref.partition(":")
    found = import_module(module)
    for name in attr.split(".") if attr else ():
        found = getattr(found, name)
    return found


def kind_names(source: str) -> tuple[str, ...]:
    """The kinds ``source`` (``kg`` / ``text`` / ``linker``) may be set to, its default first."""
    return tuple(SOURCE_KINDS[source])


def source_kind(source: str, name: str) -> Any:
    """The builder of kind ``name`` of ``source``, imported now; ConfigError for a name the registry lacks."""
    kinds = SOURCE_KINDS[source]
    if name not in kinds:
        from hqa.errors import ConfigError

        raise ConfigError(f"unknown {source}.kind {name!r}; choose one of: {', '.join(kinds)}")
    return resolve(kinds[name])()

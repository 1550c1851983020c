"""Worlds: named folders holding a knowledge graph (Oxigraph store or a SPARQL server), a label store for the entity
linker and a passage corpus with its indexes, described by a manifest (``world.json``) that ``hqa config`` can point
at.  See :mod:`hqa.retrievers.world` (the manifest format and its reader), :mod:`hqa.world.build` (the resumable builder),
:mod:`hqa.world.wikidata` (dump readers) and :mod:`hqa.world.text` (passages)."""

from hqa.retrievers.world import World, open_world

__all__ = ["World", "open_world"]

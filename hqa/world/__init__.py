"""Worlds: named folders holding a knowledge graph (Oxigraph store or a SPARQL server), a label store for the entity
linker and a passage corpus with its indexes, described by a manifest (``world.json``) that ``hqa config`` can point
at.  This package is the build side: :mod:`hqa.world.build` (the resumable builder), :mod:`hqa.world.dumps` (dump
readers), :mod:`hqa.world.kg`, :mod:`hqa.world.label_store`, :mod:`hqa.world.text` (passages) and :mod:`hqa.world.pack`
(the knowledge pack).  What they write is read by :mod:`hqa.retrievers` (:mod:`hqa.retrievers.world_manifest`: the
manifest
format and ``open_world``), which never imports this package."""

from hqa.retrievers.world_manifest import World, open_world

__all__ = ["World", "open_world"]

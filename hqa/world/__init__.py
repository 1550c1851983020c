"""Worlds, the build side: :mod:`hqa.world.build` (the resumable builder), :mod:`hqa.world.dumps` (dump readers),
:mod:`hqa.world.kg`, :mod:`hqa.world.label_store`, :mod:`hqa.world.text` (passages) and :mod:`hqa.world.pack` (the
knowledge pack).  What they write is read by :mod:`hqa.retrievers` (:mod:`hqa.retrievers.world_manifest`), which
never imports this package; docs/worlds.md describes worlds."""

"""Helpers of the world tests: tiny generated Wikidata dumps (benchmarks/gen_graph.py) and store contents."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def gen_graph():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import gen_graph as mod
    finally:
        sys.path.pop(0)
    return mod


def write_dumps(out: Path, triples: int = 1500, seed: int = 3,
                kinds=("nt", "nt.gz", "nt.bz2", "json", "json.gz", "json.bz2")) -> dict:
    g = gen_graph()
    return g.write_dumps(g.generate(triples, seed, n_props=40), out, tuple(kinds))


def store_triples(kg: Path) -> set[tuple[str, str, str]]:
    import pyoxigraph as ox

    store = ox.Store.read_only(str(kg))
    return {(q.subject.value, q.predicate.value, str(q.object)) for q in store}


def label_rows(path: Path) -> dict[str, list]:
    db = sqlite3.connect(str(path))
    try:
        return {"entities": sorted(db.execute("SELECT id, label, description, degree FROM entities").fetchall()),
                "aliases": sorted(db.execute("SELECT id, alias FROM aliases").fetchall()),
                "names": sorted(db.execute("SELECT key, id, quality FROM names").fetchall())}
    finally:
        db.close()


def build(world: Path, *sources: str, **kw):
    from hqa.world.build import BuildOptions, build_world
    from hqa.world.dumps import FORMATS, parse_source

    opts = BuildOptions(wikidata=[parse_source(s, FORMATS) for s in sources], **kw)
    return build_world(world, world.name, opts, progress=False)


class Interrupt(BaseException):
    """A kill in the middle of a build (not an Exception: nothing may catch it on the way out)."""


def load_chunks(monkeypatch, loaded: list[str], stop_after: int | None = None) -> None:
    """Record the name of every chunk the Oxigraph loader loads into ``loaded``; with ``stop_after``, raise
    :class:`Interrupt` instead of loading once that many chunks are loaded."""
    from hqa.world import kg as K

    real_load = K.OxigraphLoader.load

    def load(self, chunk):
        if stop_after is not None and len(loaded) == stop_after:
            raise Interrupt("killed")
        loaded.append(chunk.name)
        real_load(self, chunk)

    monkeypatch.setattr(K.OxigraphLoader, "load", load)

"""Build a world: the resumable orchestrator behind ``hqa world build``.

Everything in progress lives under ``<world>/.build/``: ``params.json`` (the options a resume must match), the KG part
(:mod:`hqa.world.kg`, finished into ``kg.json``), the text part (:func:`hqa.world.text.build_text`, into
``text.json``); publishing renames the parts into the world and writes ``world.json`` last.  ``force=True`` rebuilds
in a hidden sibling folder (:func:`rebuild_dir`) swapped in only when complete.  The steps and their guarantees are
in docs/worlds.md, "Building and resuming".
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hqa.errors import HQAError, WorldError
from hqa.io.files import atomic_write_json, file_digest, replace_dir
from hqa.retrievers.world_manifest import MANIFEST_NAME, WORLD_FORMAT, check_name, write_manifest

KG_ENGINES = ("oxigraph", "virtuoso", "sparql")
PARTS = ("kg", "labels.sqlite", "text")


@dataclass
class BuildOptions:
    """What a world is built from (``hqa world build``'s options)."""

    passages: list[tuple[Path, str | None]] = field(default_factory=list)
    wikidata: list[tuple[Path, str | None]] = field(default_factory=list)
    entities_file: Path | None = None
    properties: frozenset[str] | None = None
    language: str = "en"
    kg_engine: str = "oxigraph"
    kg_endpoint: str = ""  # kg_engine "sparql": the endpoint the world points at (QLever, WDQS, ...)
    virtuoso: object | None = None  # kg_engine "virtuoso": a hqa.world.virtuoso.VirtuosoTarget
    # worlds default to MiniLM's int8 copy: 2.0x the passages/s of the float model here and the same retrieval
    # recall (benchmarks/results/recall-minilm-int8.md), and the query side of a hop over 1M passages stays in the
    # 50 ms budget only with it (benchmarks/results/world_hop_1m_int8_quiet.md); the pack keeps the float model
    embedder: str | None = "minilm-int8"
    dense_engine: str | None = None  # the text builder's default when None
    dense_uri: str = ""  # a vector database server for the passage index (the text builder's dense_uri)
    chunk_triples: int = 1_000_000
    chunk_words: int = 100
    batch_size: int = 64

    def check(self) -> None:
        if self.kg_engine not in KG_ENGINES:
            raise WorldError(f"--kg-engine must be one of {', '.join(KG_ENGINES)}, got {self.kg_engine!r}")
        if self.kg_engine == "sparql" and not self.kg_endpoint.startswith(("http://", "https://")):
            raise WorldError("--kg-engine sparql needs --kg-endpoint http(s)://HOST/PATH (the SPARQL endpoint)")
        if self.kg_engine == "virtuoso" and self.virtuoso is None:
            raise WorldError("--kg-engine virtuoso needs --virtuoso-endpoint and --virtuoso-load-dir")
        if self.kg_engine == "virtuoso" and not self.wikidata:
            raise WorldError("--kg-engine virtuoso loads --wikidata dumps; none given")
        if not (self.passages or self.wikidata or self.kg_engine == "sparql"):
            raise WorldError("nothing to build: give --passages and/or --wikidata (or --kg-engine sparql "
                             "--kg-endpoint URL)")
        if self.chunk_triples < 1:
            raise WorldError("chunk_triples must be at least 1")

    def params(self) -> dict:
        """The options as they decide the result (what a resumed build must match)."""
        ent = None if self.entities_file is None else {"path": str(Path(self.entities_file).resolve()),
                                                       "sha256": _sha256_file(Path(self.entities_file))}
        virt = self.virtuoso.describe() if self.virtuoso is not None else None  # type: ignore[attr-defined]
        return {"passages": [[str(Path(p).resolve()), f] for p, f in self.passages],
                "wikidata": [[str(Path(p).resolve()), f] for p, f in self.wikidata],
                "entities": ent, "properties": sorted(self.properties) if self.properties else None,
                "language": self.language, "kg_engine": self.kg_engine, "kg_endpoint": self.kg_endpoint,
                "virtuoso": virt, "embedder": self.embedder, "dense_engine": self.dense_engine,
                "dense_uri": self.dense_uri,
                "chunk_words": self.chunk_words}


def _sha256_file(path: Path) -> str:
    try:
        return file_digest(path)
    except FileNotFoundError:
        raise WorldError(f"{path}: file not found") from None


def _remove_parts(world: Path) -> None:
    for part in PARTS:
        target = world / part
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


class _Lock:
    def __init__(self, world: Path):
        from filelock import FileLock, Timeout

        self.path = world / ".build.lock"
        self.held = FileLock(self.path)
        try:
            self.held.acquire(timeout=0)
        except Timeout:
            raise WorldError(f"another hqa world build is writing {world}; wait for it to finish") from None

    def release(self, remove: bool) -> None:
        if remove:
            self.path.unlink(missing_ok=True)
        self.held.release()


def build_world(world: Path, name: str, opts: BuildOptions, *, fresh: bool = False, force: bool = False,
                progress: bool = True, log: Callable[[str], None] = lambda _m: None,
                allow_empty: bool = False) -> dict:
    """Build (or resume building) the world ``name`` in folder ``world``; returns its manifest.

    Rebuilding a complete world (``force=True``) builds beside it, in ``<parent>/.<folder>.rebuild/`` (resumable
    like any build), and swaps the finished folder in for the old one only after its ``world.json`` is written: an
    interrupt, a malformed dump line or a full disk leaves the old world intact and usable.  A build whose dumps
    yield no triple, or whose passage files yield no passage, is refused before anything is published (the old world
    stays) unless ``allow_empty``; a world folder that is a symbolic link is never rebuilt through the link."""
    check_name(name)
    opts.check()
    given = Path(world).expanduser()
    if given.is_symlink():
        raise WorldError(f"{given} is a symbolic link to {os.path.realpath(given)}: hqa does not build or rebuild a "
                         "world through a link; give the real folder (--out DIR) or remove the link")
    world = given.resolve()
    if world.is_dir() and any(p.name != ".build.lock" for p in world.iterdir()) \
            and not any((world / n).exists() for n in (MANIFEST_NAME, ".build")):
        raise WorldError(f"{world} is not empty and not a world: build into a new or empty folder")
    world.mkdir(parents=True, exist_ok=True)
    lock = _Lock(world)
    ok = False
    target = world
    try:
        if (world / MANIFEST_NAME).exists():
            if not force:
                raise WorldError(f"world {name} already exists at {world}; pass --force to rebuild it")
            target = rebuild_dir(world)
            if not (target / ".build" / "params.json").exists():
                shutil.rmtree(target, ignore_errors=True)  # a leftover that never started (or was half swapped in)
            target.mkdir(exist_ok=True)
            log(f"rebuilding beside the old world in {target}; {world} stays usable until the new one is complete")
        manifest = _build_in(target, name, opts, fresh=fresh, rebuild=target != world, progress=progress, log=log,
                             allow_empty=allow_empty)
        if target != world:
            replace_dir(target, world)  # the old folder (and its lock file) go only once the new one is in place
        ok = True
        return manifest
    except (OSError, sqlite3.OperationalError) as exc:
        if _out_of_space(exc, target):
            raise HQAError(f"disk full while building world {name} in {target}: free space and rerun the same "
                           "command to resume") from None
        raise
    finally:
        lock.release(remove=ok or not (world / ".build").exists())


def _out_of_space(exc: BaseException, folder: Path) -> bool:
    """A full disk: the error says so, or SQLite's generic "disk I/O error" (what a journal write that hits a full
    filesystem can give) while the filesystem holding ``folder`` has under 1 MiB free."""
    from hqa.world.kg import is_disk_full

    if is_disk_full(exc):
        return True
    try:
        return "disk I/O error" in str(exc) and shutil.disk_usage(folder).free < 1 << 20
    except OSError:
        return False


def rebuild_dir(world: Path) -> Path:
    """Where ``--force`` builds the new copy of an existing world: a hidden sibling of its folder."""
    return world.parent / f".{world.name}.rebuild"


def _build_in(world: Path, name: str, opts: BuildOptions, *, fresh: bool, rebuild: bool, progress: bool,
              log: Callable[[str], None], allow_empty: bool = False) -> dict:
    build = world / ".build"
    if fresh:
        shutil.rmtree(build, ignore_errors=True)
        _remove_parts(world)
    params = opts.params()
    build.mkdir(exist_ok=True)
    params_path = build / "params.json"
    if params_path.exists():
        before = json.loads(params_path.read_text(encoding="utf-8"))
        if before != params:
            changed = sorted(k for k in set(before) | set(params) if before.get(k) != params.get(k))
            if not rebuild:
                raise WorldError(f"an interrupted build of {world} used other options ({', '.join(changed)} "
                                 "differ): rerun it with the same options to resume, or pass --fresh to start over")
            log(f"the interrupted rebuild in {world} used other options ({', '.join(changed)}); it starts over")
            shutil.rmtree(build)
            _remove_parts(world)
            build.mkdir()
        else:
            log(f"resuming the interrupted build in {build}")
    if not params_path.exists():
        _remove_parts(world)  # leftovers of a build whose .build was removed by hand
        atomic_write_json(params_path, params)
    kg = _kg_part(world, build, name, opts, progress, log)
    text = _text_part(world, build, opts, progress, log)
    if not allow_empty:
        _refuse_empty(name, opts, kg, text, rebuild)
    return _publish(world, build, name, opts, params, kg, text)


def _refuse_empty(name: str, opts: BuildOptions, kg: dict | None, text: dict | None, rebuild: bool) -> None:
    """A WorldError when given dumps yielded no triple or given passage files no passage: publishing that would
    (with ``--force``) replace a working world with an empty one.  The finished parts stay checkpointed, so the same
    command with ``--allow-empty`` publishes at once."""
    empty = []
    if opts.wikidata and not int(((kg or {}).get("kg") or {}).get("triples") or 0):
        empty.append(f"the Wikidata dump(s) {', '.join(str(p) for p, _ in opts.wikidata)} yielded 0 triples")
    if opts.passages and not int((text or {}).get("passages") or 0):
        empty.append(f"the passage file(s) {', '.join(str(p) for p, _ in opts.passages)} yielded 0 passages")
    if empty:
        keep = f"; the existing world {name} is untouched" if rebuild else ""
        raise WorldError(f"refused to publish an empty world {name}: {' and '.join(empty)}{keep} "
                         "(pass --allow-empty to publish it anyway)")


def _kg_part(world: Path, build: Path, name: str, opts: BuildOptions, progress: bool,
             log: Callable[[str], None]) -> dict | None:
    done = build / "kg.json"
    if done.exists():
        return json.loads(done.read_text(encoding="utf-8"))
    if not opts.wikidata:
        if opts.kg_engine != "sparql":
            return None
        result = {"kg": {"engine": "sparql", "endpoint": opts.kg_endpoint}, "labels": None, "sources": []}
        atomic_write_json(done, result)
        return result
    from hqa.world.kg import KGSource, NoLoader, OxigraphLoader, VirtuosoLoader, build_kg, changed_sources
    from hqa.world.dumps import TripleFilter, read_id_file

    entities = read_id_file(opts.entities_file) if opts.entities_file is not None else None
    filt = TripleFilter(entities=entities, properties=opts.properties, language=opts.language)
    sources = [KGSource(Path(p), f) for p, f in opts.wikidata]
    stage = build / "kg-stage"
    changed = changed_sources(stage, sources)
    if changed:  # what was loaded from the old file cannot be told apart: the KG part starts over
        log(f"{changed[0]} changed since the interrupted build; the KG part starts over")
        shutil.rmtree(stage)
        shutil.rmtree(build / "kg", ignore_errors=True)
    starting = not stage.exists()
    if opts.kg_engine == "oxigraph":
        loader = OxigraphLoader(build / "kg")
    elif opts.kg_engine == "virtuoso":
        target = opts.virtuoso
        if not getattr(target, "graph", ""):
            target.graph = f"urn:hqa:world:{name}"  # type: ignore[attr-defined]
        token = f"{name}-{hashlib.sha256(str(world).encode()).hexdigest()[:8]}"
        loader = VirtuosoLoader(target, token)
        if starting:
            loader.reset()
    else:
        loader = NoLoader(opts.kg_endpoint)
    log(f"KG: {len(opts.wikidata)} Wikidata dump(s) -> {opts.kg_engine}")
    t0 = time.monotonic()
    try:
        result = build_kg(stage, sources, filt, loader, chunk_triples=opts.chunk_triples, progress=progress)
    finally:
        loader.close()
    kg = dict(result.kg)
    kg["seconds"] = round(time.monotonic() - t0, 1)
    out = {"kg": kg, "labels": result.labels, "sources": result.sources}
    atomic_write_json(done, out)
    return out


def _text_part(world: Path, build: Path, opts: BuildOptions, progress: bool,
               log: Callable[[str], None]) -> dict | None:
    if not opts.passages:
        return None
    done = build / "text.json"
    if done.exists():
        return json.loads(done.read_text(encoding="utf-8"))
    try:
        from hqa.world.text import build_text
    except ImportError as exc:
        raise WorldError(f"the passage side of worlds is not available in this installation ({exc})") from None
    log(f"text: {len(opts.passages)} passage file(s)")
    section = build_text(world, [(Path(p), f) for p, f in opts.passages], embedder=opts.embedder,
                         engine=opts.dense_engine or "auto", chunk_words=opts.chunk_words, batch_size=opts.batch_size,
                         progress=progress, dense_uri=opts.dense_uri)
    atomic_write_json(done, section)
    return section


def _publish(world: Path, build: Path, name: str, opts: BuildOptions, params: dict, kg: dict | None,
             text: dict | None) -> dict:
    kg_section = (kg or {}).get("kg")
    labels = (kg or {}).get("labels")
    if kg_section and kg_section.get("engine") == "oxigraph" and (build / "kg").exists():
        if (world / "kg").exists():
            shutil.rmtree(world / "kg")
        os.replace(build / "kg", world / "kg")
    staged_labels = build / "kg-stage" / "labels.sqlite"
    if labels and staged_labels.exists():
        os.replace(staged_labels, world / "labels.sqlite")
    sources = list((kg or {}).get("sources") or [])
    for rec in (text or {}).get("sources") or []:
        if isinstance(rec, dict) and all(k in rec for k in ("path", "format", "bytes", "sha256", "records")):
            sources.append({**rec, "part": "text"})
    digest = hashlib.sha256(json.dumps([params, [s.get("sha256") for s in sources]], sort_keys=True).encode())
    from hqa.version import __version__

    counts = {"sources": len(sources)}
    if kg_section:
        counts.update({k: kg_section[k] for k in ("triples", "statements") if k in kg_section})
    if labels:
        counts.update({f"label_{k}": labels[k] for k in ("entities", "labelled", "aliases") if k in labels})
    if text:
        counts.update({f"text_{k}": v for k, v in text.items() if k in ("passages", "documents")
                       and isinstance(v, int)})
    manifest = {
        "format": WORLD_FORMAT, "name": name, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "complete": True, "hqa_version": __version__, "version": digest.hexdigest()[:16],
        "sources": sources, "embedder": (text or {}).get("embedder", opts.embedder if text else None),
        "text": text, "kg": kg_section, "labels": labels, "counts": counts, "options": params,
    }
    write_manifest(world, manifest)  # last: from here on the folder is a world
    shutil.rmtree(build, ignore_errors=True)
    return manifest


def worlds_dir(artifacts: Path) -> Path:
    return Path(artifacts) / "worlds"


def list_worlds(artifacts: Path) -> list[dict]:
    """Every folder under ``<artifacts>/worlds`` with its state: complete worlds with their summary, and
    incomplete (interrupted) builds."""
    from hqa.retrievers.world_manifest import open_world

    out = []
    root = worlds_dir(artifacts)
    for folder in sorted(p for p in root.glob("*") if p.is_dir() and not p.name.startswith(".")) \
            if root.is_dir() else []:
        try:
            out.append({"state": "complete", **open_world(folder).describe()})
        except WorldError as exc:
            out.append({"state": "incomplete" if (folder / ".build").exists() else "broken", "name": folder.name,
                        "path": str(folder), "error": str(exc)})
    return out


def remove_world(world: Path) -> str:
    """Delete a world folder (its ``world.json`` first, so a half-removed world never looks complete) and the folder
    of an interrupted ``--force`` rebuild of it; returns what was done, in one line.  A world that is a symbolic link
    loses the link only: its target is never touched through it."""
    world = Path(world)
    if world.is_symlink():  # the link goes, never what it points at (nor a rebuild folder beside the link)
        target = os.path.realpath(world)
        world.unlink()
        return f"removed the link {world}; its target {target} is untouched"
    if not world.is_dir():
        raise WorldError(f"no world at {world}")
    lock = _Lock(world)
    try:
        (world / MANIFEST_NAME).unlink(missing_ok=True)
    finally:
        lock.release(remove=False)
    shutil.rmtree(world)
    shutil.rmtree(rebuild_dir(world), ignore_errors=True)  # an interrupted --force rebuild of it
    return f"removed world folder {world}"


__all__ = ["BuildOptions", "build_world", "list_worlds", "remove_world", "worlds_dir"]

"""A world's manifest (``<world>/world.json``): what it was built from and where each part lives.

A world is a folder; it *is* a world only once ``world.json`` exists with ``"complete": true``.  The build writes the
manifest last, atomically (:func:`hqa.io.files.atomic_write_json`), after every part finished, so an interrupted build
never leaves a folder that opens as a world.  Its fields (``"format": 1``) are listed in docs/worlds.md, "Manifest";
:func:`validate` checks them.  The knowledge pack writes the same manifest (:func:`world_manifest`).
The read side of a world; the builders in :mod:`hqa.world` write what it opens (docs/worlds.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hqa.config import WORLD_NAME_RE as NAME_RE
from hqa.data.pack_manifest import read_manifest as read_pack_manifest
from hqa.errors import WorldError
from hqa.io.files import atomic_write_json
from hqa.version import __version__

WORLD_FORMAT = 1
MANIFEST_NAME = "world.json"
KG_ENGINES = ("oxigraph", "virtuoso", "sparql")
LABEL_FORMATS = ("sqlite", "pack-jsonl")
_REQUIRED: dict[str, tuple[type, ...]] = {
    "format": (int,), "name": (str,), "created": (str,), "complete": (bool,), "hqa_version": (str,),
    "sources": (list,), "text": (dict, type(None)), "kg": (dict, type(None)), "labels": (dict, type(None)),
    "counts": (dict,),
}


def check_name(name: str) -> str:
    """A world name usable as a folder name (letters, digits, ``._-``; at most 64 characters)."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or name in (".", ".."):
        raise WorldError(f"world name {name!r} must be 1-64 letters, digits, '.', '_' or '-' (not starting with "
                         "'.', '_' or '-')")
    return name


def _inside(world: Path, rel: Any, what: str) -> Path:
    if not isinstance(rel, str) or not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise WorldError(f"world manifest {world / MANIFEST_NAME}: {what} path {rel!r} must be relative to the world")
    return world / rel


def validate(manifest: Any, world: Path) -> dict:
    """Check a manifest's shape (one clear line naming the first problem); returns it."""
    where = world / MANIFEST_NAME
    if not isinstance(manifest, dict):
        raise WorldError(f"world manifest {where} is not a JSON object")
    fmt = manifest.get("format")
    if isinstance(fmt, int) and fmt > WORLD_FORMAT:
        raise WorldError(f"world manifest {where} has format {fmt}, newer than this hqa reads ({WORLD_FORMAT}); "
                         "upgrade hqa")
    for key, types in _REQUIRED.items():
        if key not in manifest:
            raise WorldError(f"world manifest {where} lacks {key!r}")
        if not isinstance(manifest[key], types) or (types == (int,) and isinstance(manifest[key], bool)):
            raise WorldError(f"world manifest {where}: {key!r} has the wrong type ({type(manifest[key]).__name__})")
    if fmt != WORLD_FORMAT:
        raise WorldError(f"world manifest {where} has format {fmt}, expected {WORLD_FORMAT}")
    for i, src in enumerate(manifest["sources"]):
        if not isinstance(src, dict) or not all(k in src for k in ("path", "format", "bytes", "sha256", "records")):
            raise WorldError(f"world manifest {where}: sources[{i}] needs path, format, bytes, sha256 and records")
    for section, key, allowed in (("kg", "engine", KG_ENGINES), ("labels", "format", LABEL_FORMATS)):
        part = manifest[section]
        if part is not None and part.get(key) not in allowed:
            raise WorldError(f"world manifest {where}: {section}.{key} {part.get(key)!r} is not one of "
                             f"{', '.join(allowed)}")
    kg, labels = manifest["kg"], manifest["labels"]
    if kg is not None and kg["engine"] == "oxigraph":
        _inside(world, kg.get("path"), "kg")
    elif kg is not None and not str(kg.get("endpoint", "")).startswith(("http://", "https://")):
        raise WorldError(f"world manifest {where}: kg.engine {kg['engine']} needs an http(s) kg.endpoint")
    if labels is not None:
        _inside(world, labels.get("path"), "labels")
    return manifest


def write_manifest(world: Path, manifest: dict) -> None:
    """Validate and write ``world.json`` atomically (the last step of a build)."""
    validate(manifest, Path(world))
    atomic_write_json(Path(world) / MANIFEST_NAME, manifest)


def read_manifest(world: Path, hint: str = "") -> dict:
    """The manifest of a complete world, or one clear WorldError (missing, incomplete, corrupt)."""
    world = Path(world)
    path = world / MANIFEST_NAME
    again = hint or f"rerun hqa world build for {world} to resume"
    if not world.is_dir():
        raise WorldError(f"world {world} does not exist (build it with: hqa world build NAME ...)")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if (world / ".build").is_dir():
            raise WorldError(f"world {world} is incomplete (an interrupted build): {again}") from None
        raise WorldError(f"{world} is not a world (no {MANIFEST_NAME}); build one with: hqa world build NAME ...") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise WorldError(f"world manifest {path} cannot be read: {exc}") from None
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorldError(f"world manifest {path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(manifest, dict) and manifest.get("complete") is not True:
        raise WorldError(f"world {world} is incomplete: {again}")
    return validate(manifest, world)


@dataclass
class World:
    """An opened (complete) world: its folder and manifest, with the location of each part."""

    path: Path
    manifest: dict

    @property
    def name(self) -> str:
        return str(self.manifest.get("name", self.path.name))

    @property
    def version(self) -> str:
        return str(self.manifest.get("version", ""))

    @property
    def kg(self) -> dict | None:
        return self.manifest.get("kg")

    @property
    def labels(self) -> dict | None:
        return self.manifest.get("labels")

    @property
    def text(self) -> dict | None:
        return self.manifest.get("text")

    @property
    def kg_path(self) -> Path | None:
        """The embedded store's folder (engine oxigraph), else None."""
        kg = self.kg
        return self.path / kg["path"] if kg and kg.get("engine") == "oxigraph" else None

    @property
    def kg_endpoint(self) -> str | None:
        """The SPARQL endpoint of a server-side KG (engine virtuoso / sparql), else None."""
        kg = self.kg
        return str(kg["endpoint"]) if kg and kg.get("engine") in ("virtuoso", "sparql") else None

    @property
    def passage_embedder(self) -> str | None:
        """The embedder of the world's own passage index, else None (no passages, or the knowledge pack's)."""
        text = self.text or {}
        return text.get("embedder") if text.get("engine") not in (None, "pack") else None

    @property
    def labels_path(self) -> Path | None:
        return self.path / self.labels["path"] if self.labels else None

    def describe(self) -> dict:
        """A short summary for ``hqa world list``."""
        kg, labels, text = self.kg or {}, self.labels or {}, self.text or {}
        return {"name": self.name, "path": str(self.path), "created": self.manifest.get("created"),
                "kg": kg.get("engine"), "triples": kg.get("triples"), "entities": labels.get("entities"),
                "labelled": labels.get("labelled"),  # entities with a label (the manifest's count)
                "passages": text.get("passages"), "text_engine": text.get("engine")}


def open_world(path: Path | str, hint: str = "") -> World:
    """Open a complete world folder (WorldError otherwise; ``hint`` says how to finish an incomplete one)."""
    path = Path(path).expanduser().resolve()
    return World(path, read_manifest(path, hint))


def world_manifest(manifest: dict, sources: list[dict]) -> dict:
    """The pack as a world (``world.json``, this module's format): the Oxigraph store ``kg``, the
    labels of ``entities.jsonl`` (read by the pack linker), the passages of ``passages.jsonl`` and the facts of
    ``facts.jsonl`` (BM25 over linearized triples)."""
    counts = dict(manifest.get("counts", {}))
    return {
        "format": 1, "name": "pack", "created": manifest.get("created", ""), "complete": True,
        "hqa_version": __version__, "version": str(manifest.get("version", "")), "sources": sources, "embedder": None,
        "text": {"engine": "pack", "path": "passages.jsonl", "passages": counts.get("passages")},
        "kg": {"engine": "oxigraph", "path": "kg", "triples": counts.get("quads"), "facts": "facts.jsonl",
               "statements": counts.get("facts")},
        "labels": {"format": "pack-jsonl", "path": "entities.jsonl", "entities": counts.get("entities"),
                   "labelled": counts.get("labelled_entities")},
        "counts": counts, **({"attribution": manifest["attribution"]} if manifest.get("attribution") else {}),
    }


def open_pack_world(pack_dir: Path):
    """The pack opened as a world: its ``world.json``, or for a pack built before worlds existed, the same manifest
    derived from ``manifest.json``.  PackMissingError ("run: hqa pack build") when there is no pack."""
    manifest = read_pack_manifest(pack_dir)
    if (Path(pack_dir) / MANIFEST_NAME).exists():
        return open_world(pack_dir, hint="run: hqa pack build")
    return World(Path(pack_dir).resolve(), world_manifest(manifest, []))


__all__ = ["World", "open_world", "open_pack_world", "world_manifest", "read_manifest", "write_manifest", "validate",
           "check_name", "WORLD_FORMAT", "MANIFEST_NAME", "KG_ENGINES"]

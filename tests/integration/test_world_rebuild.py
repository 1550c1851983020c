"""``hqa world build NAME --force`` builds beside the old world and swaps the new one in only when it is complete:
a malformed dump line, an interrupt or a full disk mid-build leave the old world intact, opening and answering."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from hqa.cli.entry import main
from hqa.errors import DataError, HQAError
from hqa.toolbox import Toolbox
from hqa.world.build import BuildOptions, build_world, rebuild_dir
from hqa.retrievers.world_manifest import open_world
from hqa.world.dumps import FORMATS, parse_source
from worldkit import Interrupt, load_chunks, store_triples, write_dumps

WD = "http://www.wikidata.org/entity/"
WDT = "http://www.wikidata.org/prop/direct/"


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dumps")
    write_dumps(out, kinds=("nt",))
    return out


def _build(world: Path, source: str, force: bool = False, **kw) -> dict:
    opts = BuildOptions(wikidata=[parse_source(source, FORMATS)], **kw)
    return build_world(world, world.name, opts, force=force, progress=False)


@pytest.fixture()
def old(dumps, tmp_path) -> tuple[Path, str, set]:
    """A complete world built from the P31/P17 statements only: (folder, its world.json, its triples)."""
    world = tmp_path / "worlds" / "w"
    _build(world, str(dumps / "truthy.nt"), properties=frozenset({"P31", "P17"}))
    return world, (world / "world.json").read_text(), store_triples(world / "kg")


def _answers(world: Path, triples: set) -> None:
    """The world opens, is complete, and its KG answers a query with the triples it was built with."""
    from hqa.config import load_settings

    assert open_world(world).manifest["complete"] is True
    subject, pred, _obj = sorted(t for t in triples if t[1].startswith(WDT))[0]
    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, world_path=str(world))
    res = Toolbox(settings).sparql.run(f"SELECT ?o WHERE {{ <{subject}> <{pred}> ?o }}")
    assert res.ok, res.error
    assert res.rows


def _intact(world: Path, manifest: str, triples: set) -> None:
    assert (world / "world.json").read_text() == manifest
    assert store_triples(world / "kg") == triples
    _answers(world, triples)


def test_a_malformed_dump_leaves_the_old_world_intact(dumps, old, tmp_path):
    world, manifest, triples = old
    lines = (dumps / "truthy.nt").read_text().splitlines(keepends=True)
    bad = tmp_path / "bad.nt"
    bad.write_text("".join(lines[:40] + ["this is not a triple\n"] + lines[40:]))
    with pytest.raises(DataError, match=r"bad.nt:41: malformed N-Triples line"):
        _build(world, str(bad), force=True)
    _intact(world, manifest, triples)
    assert not (world / ".build").exists()


def test_an_interrupt_mid_build_leaves_the_old_world_intact_and_the_rebuild_resumes(dumps, old, monkeypatch):
    world, manifest, triples = old
    loaded: list[str] = []
    load_chunks(monkeypatch, loaded, stop_after=2)
    with pytest.raises(Interrupt):
        _build(world, str(dumps / "truthy.nt"), force=True, chunk_triples=400)
    _intact(world, manifest, triples)
    assert (rebuild_dir(world) / ".build" / "params.json").exists()
    load_chunks(monkeypatch, loaded)
    new = _build(world, str(dumps / "truthy.nt"), force=True, chunk_triples=400)
    assert loaded[:3] == ["000-000000.nt", "000-000001.nt", "000-000002.nt"]  # resumed: no chunk loaded twice
    assert not rebuild_dir(world).exists() and not (world / ".build").exists()
    assert json.loads((world / "world.json").read_text())["version"] == new["version"]
    rebuilt = store_triples(world / "kg")
    assert triples < rebuilt  # the new world (all properties) replaced the old one (P31/P17 only)
    _answers(world, rebuilt)


def test_a_full_disk_mid_build_leaves_the_old_world_intact(dumps, old, monkeypatch):
    from hqa.world import label_store as L

    world, manifest, triples = old
    real = L.LabelStoreWriter.commit_chunk
    calls = []

    def full(self, *a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *a, **kw)

    monkeypatch.setattr(L.LabelStoreWriter, "commit_chunk", full)
    with pytest.raises(HQAError, match="disk full"):
        _build(world, str(dumps / "truthy.nt"), force=True, chunk_triples=400)
    _intact(world, manifest, triples)


def test_a_real_full_disk_mid_rebuild_leaves_the_old_world_intact(dumps, old, tmp_path):
    """The old world copied onto a tmpfs with 200 KB to spare (the rebuild of the full dump needs more): the real
    ENOSPC is one disk-full error and the old world answers.
    (Mounting needs root, which scripts/setup and CI have, as in test_world.py.)"""
    import shutil
    import subprocess

    world, manifest, triples = old
    used = sum(p.stat().st_size for p in world.rglob("*") if p.is_file())
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={used // 1024 + 200}k", "tmpfs", str(mnt)], check=True,
                   capture_output=True)
    try:
        shutil.copytree(world, mnt / "w")
        with pytest.raises(HQAError, match=r"disk full .*free space and rerun"):
            _build(mnt / "w", str(dumps / "truthy.nt"), force=True)
        _intact(mnt / "w", manifest, triples)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)  # lazy: the opened store may still hold files


def test_sqlite_io_error_on_a_full_filesystem_is_a_full_disk(dumps, old, monkeypatch):
    """SQLite can report a journal write on a full filesystem as a generic "disk I/O error": with (almost) no free
    space left it is the disk-full error; with room left it stays the error it is."""
    import shutil
    import sqlite3
    from collections import namedtuple

    from hqa.world import kg as K

    world, manifest, triples = old
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(K.OxigraphLoader, "load",
                        lambda self, chunk: (_ for _ in ()).throw(sqlite3.OperationalError("disk I/O error")))
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 30, (1 << 30) - 4096, 4096))
    with pytest.raises(HQAError, match=r"disk full while building world w .*free space and rerun"):
        _build(world, str(dumps / "truthy.nt"), force=True)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 30, 0, 1 << 30))
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        _build(world, str(dumps / "truthy.nt"), force=True)
    _intact(world, manifest, triples)


def test_a_failing_swap_puts_the_old_world_back(dumps, old, monkeypatch):
    """The last step (the rename of the finished folder over the old one) failing restores the old folder."""
    import os

    from hqa.io import files as fsutil

    world, manifest, triples = old
    real = os.replace

    def fail_on_swap(src, dst):
        if Path(src) == rebuild_dir(world):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(src, dst)

    monkeypatch.setattr(fsutil.os, "replace", fail_on_swap)
    with pytest.raises(OSError, match="cross-device"):
        _build(world, str(dumps / "truthy.nt"), force=True)
    monkeypatch.undo()
    _intact(world, manifest, triples)


def test_cli_force_rebuild_of_a_named_world(dumps, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HQA_PATHS__ARTIFACTS", str(tmp_path / "art"))
    monkeypatch.setenv("HQA_CONFIG", str(tmp_path / "hqa.toml"))
    (tmp_path / "hqa.toml").write_text("")
    src = str(dumps / "truthy.nt") + ":nt"
    assert main(["world", "build", "tiny", "--wikidata", src, "--properties", "P31", "--quiet"]) == 0
    world = tmp_path / "art" / "worlds" / "tiny"
    manifest, triples = (world / "world.json").read_text(), store_triples(world / "kg")
    bad = tmp_path / "bad.nt"
    bad.write_text((dumps / "truthy.nt").read_text() + "not a triple\n")
    assert main(["world", "build", "tiny", "--wikidata", str(bad) + ":nt", "--force", "--quiet"]) == 2
    assert "malformed N-Triples line" in capsys.readouterr().err
    with monkeypatch.context() as m:
        m.delenv("HQA_CONFIG")
        _intact(world, manifest, triples)
    assert main(["world", "list"]) == 0
    assert ".tiny.rebuild" not in capsys.readouterr().out  # the half-built copy is not listed as a world
    assert main(["world", "build", "tiny", "--wikidata", src, "--force", "--quiet"]) == 0
    assert triples < store_triples(world / "kg")


def test_removing_a_world_removes_its_interrupted_rebuild(dumps, old, monkeypatch):
    from hqa.world.build import remove_world

    world, _manifest, _triples = old
    load_chunks(monkeypatch, [], stop_after=0)
    with pytest.raises(Interrupt):
        _build(world, str(dumps / "truthy.nt"), force=True)
    assert rebuild_dir(world).is_dir()
    remove_world(world)
    assert not world.exists() and not rebuild_dir(world).exists()

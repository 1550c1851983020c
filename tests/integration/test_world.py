"""Worlds built from generated Wikidata dumps in the real formats: truthy N-Triples and the JSON entity dump (plain,
gzip, bzip2), filters, the manifest, resuming after an interruption or a full disk, and bad input."""

from __future__ import annotations

import errno
import gzip
import json
import shutil
from pathlib import Path

import pytest
from worldkit import Interrupt, build, label_rows, load_chunks, store_triples, write_dumps

from hqa.errors import DataError, HQAError, WorldError
from hqa.retrievers.world_manifest import open_world, read_manifest, validate

WD = "http://www.wikidata.org/entity/"
WDT = "http://www.wikidata.org/prop/direct/"
LABEL = "http://www.w3.org/2000/01/rdf-schema#label"


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dumps")
    write_dumps(out)
    return out


@pytest.fixture(scope="module")
def nt_world(dumps, tmp_path_factory) -> Path:
    world = tmp_path_factory.mktemp("worlds") / "nt"
    build(world, str(dumps / "truthy.nt.gz"), chunk_triples=400)
    return world


def test_both_dump_formats_give_the_same_world(dumps, nt_world, tmp_path):
    """The JSON dump (all ranks, novalue snaks, other value types) reduced to truthy triples equals the truthy
    N-Triples the generator wrote independently; plain, gzip and bzip2 read alike."""
    json_world = tmp_path / "json"
    build(json_world, str(dumps / "entities.json.bz2"), chunk_triples=300)
    expected = store_triples(nt_world / "kg")
    assert store_triples(json_world / "kg") == expected
    assert label_rows(json_world / "labels.sqlite") == label_rows(nt_world / "labels.sqlite")
    plain = tmp_path / "plain"
    build(plain, str(dumps / "truthy.nt.bz2"))
    assert store_triples(plain / "kg") == expected
    preds = {p for _s, p, _o in expected}
    assert LABEL in preds and "http://www.w3.org/2004/02/skos/core#altLabel" in preds
    assert not any(p.endswith(("#type", "version", "prefLabel", "/name", "inLanguage", "about")) for p in preds)
    langs = {o.rsplit("@", 1)[-1] for _s, p, o in expected if p == LABEL}
    assert langs == {"en"}


def test_filters_entities_properties_language(dumps, tmp_path):
    qids = tmp_path / "qids.txt"
    qids.write_text("# a few items\nQ1, Q2\nhttp://www.wikidata.org/entity/Q3\nQ5\n")
    world = tmp_path / "filtered"
    m = build(world, str(dumps / "truthy.nt"), entities_file=qids, properties=frozenset({"P31", "P17"}))
    triples = store_triples(world / "kg")
    subjects = {s for s, _p, _o in triples}
    assert subjects <= {f"{WD}Q{i}" for i in (1, 2, 3, 5)} | {f"{WD}P31", f"{WD}P17"}
    assert {p for _s, p, _o in triples if p.startswith(WDT)} <= {WDT + "P31", WDT + "P17"}
    assert m["kg"]["filter"] == {"entities": 4, "properties": ["P17", "P31"], "language": "en"}
    german = tmp_path / "de"
    build(german, str(dumps / "truthy.nt.gz"), language="de")
    labels = [o for _s, p, o in store_triples(german / "kg") if p == LABEL]
    assert labels and all(o.endswith('"@de') for o in labels)


def test_manifest_records_sources_and_parts(dumps, nt_world):
    m = read_manifest(nt_world)
    assert m["complete"] is True and m["format"] == 1 and m["name"] == "nt"
    (src,) = m["sources"]
    raw = (dumps / "truthy.nt.gz").read_bytes()
    import hashlib

    assert src["bytes"] == len(raw) and src["sha256"] == hashlib.sha256(raw).hexdigest()
    assert src["compression"] == "gzip" and src["records"] == len(gzip.decompress(raw).splitlines())
    assert m["kg"]["engine"] == "oxigraph" and m["kg"]["triples"] == len(store_triples(nt_world / "kg"))
    assert m["labels"]["entities"] > 0 and (nt_world / m["labels"]["path"]).is_file()
    assert not (nt_world / ".build").exists()
    w = open_world(nt_world)
    assert w.kg_path == nt_world / "kg" and w.kg_endpoint is None


@pytest.mark.parametrize("change,message", [
    (lambda m: m.update(format=2), "newer than this hqa reads"),
    (lambda m: m["kg"].update(engine="blazegraph"), "kg.engine 'blazegraph'"),
    (lambda m: m["kg"].update(path="../elsewhere"), "must be relative to the world"),
    (lambda m: m.pop("sources"), "lacks 'sources'"),
    (lambda m: m["kg"].update(engine="sparql"), r"needs an http\(s\) kg.endpoint"),
])
def test_manifest_validation(nt_world, change, message):
    m = json.loads((nt_world / "world.json").read_text())
    change(m)
    with pytest.raises(WorldError, match=message):
        validate(m, nt_world)


def test_incomplete_folder_is_not_a_world(tmp_path, nt_world):
    copy = tmp_path / "copy"
    shutil.copytree(nt_world, copy)
    m = json.loads((copy / "world.json").read_text())
    m["complete"] = False
    (copy / "world.json").write_text(json.dumps(m))
    with pytest.raises(WorldError, match="is incomplete"):
        open_world(copy)
    (copy / "world.json").unlink()
    with pytest.raises(WorldError, match="not a world"):
        open_world(copy)


class _Interrupt(BaseException):
    pass


def test_interrupted_build_resumes_from_its_checkpoint(dumps, nt_world, tmp_path, monkeypatch):
    """A build stopped after two chunks is not a world; the rerun loads from the third chunk on (the checkpoint),
    and the result equals an uninterrupted build."""
    loaded: list[str] = []
    load_chunks(monkeypatch, loaded, stop_after=2)
    world = tmp_path / "resumed"
    with pytest.raises(Interrupt):
        build(world, str(dumps / "truthy.nt.gz"), chunk_triples=400)
    assert not (world / "world.json").exists() and (world / ".build").is_dir()
    with pytest.raises(WorldError, match="incomplete"):
        open_world(world)
    load_chunks(monkeypatch, loaded)
    build(world, str(dumps / "truthy.nt.gz"), chunk_triples=400)
    assert loaded[:3] == ["000-000000.nt", "000-000001.nt", "000-000002.nt"]  # no chunk loaded twice
    assert store_triples(world / "kg") == store_triples(nt_world / "kg")
    assert label_rows(world / "labels.sqlite") == label_rows(nt_world / "labels.sqlite")


def test_disk_full_is_one_error_and_the_build_resumes(dumps, nt_world, tmp_path, monkeypatch):
    from hqa.world import label_store as L

    real = L.LabelStoreWriter.commit_chunk
    calls = []

    def full(self, *a, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *a, **kw)

    monkeypatch.setattr(L.LabelStoreWriter, "commit_chunk", full)
    world = tmp_path / "full"
    with pytest.raises(HQAError, match=r"disk full while loading .*truthy.nt.gz \(line \d+\).*resumes after line \d+"):
        build(world, str(dumps / "truthy.nt.gz"), chunk_triples=400)
    assert not (world / "world.json").exists()
    monkeypatch.setattr(L.LabelStoreWriter, "commit_chunk", real)
    build(world, str(dumps / "truthy.nt.gz"), chunk_triples=400)
    assert store_triples(world / "kg") == store_triples(nt_world / "kg")


def test_disk_full_on_a_real_small_filesystem(dumps, tmp_path):
    """A world on a 200 KB tmpfs: the real ENOSPC from the store or the label store is one line, and nothing looks
    complete.  (Mounting needs root, which scripts/setup and CI have.)"""
    import subprocess

    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mnt)], check=True, capture_output=True)
    try:
        with pytest.raises(HQAError, match="disk full") as info:
            build(mnt / "w", str(dumps / "truthy.nt"), chunk_triples=50_000)
        assert "free space and rerun" in str(info.value) and not (mnt / "w" / "world.json").exists()
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def _cut(src: Path, dest: Path, keep: float = 0.5) -> Path:
    raw = src.read_bytes()
    dest.write_bytes(raw[: int(len(raw) * keep)])
    return dest


@pytest.mark.parametrize("name", ["truthy.nt.gz", "truthy.nt.bz2", "entities.json.gz"])
def test_truncated_compressed_dump(dumps, nt_world, tmp_path, name):
    cut = _cut(dumps / name, tmp_path / name)
    world = tmp_path / "w"
    with pytest.raises(DataError, match=rf"{name}:\d+: the (gzip|bzip2) stream ends early \(truncated file\?\)") \
            as info:
        build(world, str(cut), chunk_triples=300)
    line = int(str(info.value).split(f"{name}:")[1].split(":")[0])
    import bz2

    total = len((gzip if name.endswith(".gz") else bz2).decompress((dumps / name).read_bytes()).splitlines())
    assert total // 4 < line < total  # near the cut (half the file), not at the start: what came before was read
    assert not (world / "world.json").exists()
    shutil.copy(dumps / name, cut)  # the complete file: the KG part starts over and finishes
    build(world, str(cut), chunk_triples=300)
    assert store_triples(world / "kg") == store_triples(nt_world / "kg")


def test_corrupt_gzip(dumps, tmp_path):
    raw = bytearray((dumps / "truthy.nt.gz").read_bytes())
    mid = len(raw) // 2
    raw[mid: mid + 64] = bytes(64)
    bad = tmp_path / "bad.nt.gz"
    bad.write_bytes(bytes(raw))
    # zeroed deflate data either fails to decode or decodes to garbage lines before the CRC check at the end:
    # one line naming the file and line either way, and no world
    with pytest.raises(DataError, match=r"bad.nt.gz:\d+: (corrupt gzip data|malformed N-Triples line)"):
        build(tmp_path / "w", str(bad))
    assert not (tmp_path / "w" / "world.json").exists()


def test_malformed_lines_name_the_source_line(dumps, tmp_path):
    lines = (dumps / "truthy.nt").read_text().splitlines(keepends=True)
    # line 9: the structure is fine but the literal never closes — the loader rejects it; before it, dropped
    # lines (types, versions, other languages), so the chunk line and the source line differ
    bad = lines[:8] + [f'<{WD}Q1> <{WDT}P31> "never closed .\n'] + lines[8:]
    path = tmp_path / "bad.nt"
    path.write_text("".join(bad))
    with pytest.raises(DataError, match=r"bad.nt:9: malformed triple"):
        build(tmp_path / "w1", str(path), chunk_triples=10_000)
    path.write_text("".join(lines[:5] + ["this is not a triple\n"] + lines[5:]))
    with pytest.raises(DataError, match=r"bad.nt:6: malformed N-Triples line"):
        build(tmp_path / "w2", str(path))
    js = (dumps / "entities.json").read_text().splitlines(keepends=True)
    jpath = tmp_path / "bad.json"
    jpath.write_text("".join(js[:3] + ['{"type": "item", "id": "Q9", "claims": \n'] + js[3:]))
    with pytest.raises(DataError, match=r"bad.json:4: malformed JSON entity"):
        build(tmp_path / "w3", str(jpath))


def test_wrong_format_is_named(dumps, tmp_path):
    with pytest.raises(DataError, match=r"entities.json.gz:1: not N-Triples .* pass .*:json"):
        build(tmp_path / "a", str(dumps / "entities.json.gz") + ":nt")
    with pytest.raises(DataError, match=r"truthy.nt:1: not a Wikidata JSON dump"):
        build(tmp_path / "b", str(dumps / "truthy.nt") + ":json")
    passages = tmp_path / "passages.jsonl"
    passages.write_text('{"id": "p1", "title": "Gabon", "text": "Gabon is a country."}\n')
    with pytest.raises(DataError, match=r"passages.jsonl:1: not a Wikidata entity .* --passages"):
        build(tmp_path / "c", str(passages))


def test_rerun_with_other_options_is_refused(dumps, tmp_path, monkeypatch):
    from hqa.world import kg as K

    def stop(self, chunk):
        raise _Interrupt()

    monkeypatch.setattr(K.OxigraphLoader, "load", stop)
    world = tmp_path / "w"
    with pytest.raises(_Interrupt):
        build(world, str(dumps / "truthy.nt.gz"), chunk_triples=100)
    monkeypatch.undo()
    with pytest.raises(WorldError, match="used other options .*language"):
        build(world, str(dumps / "truthy.nt.gz"), chunk_triples=100, language="de")
    done = world.parent / "done"
    build(done, str(dumps / "truthy.nt"))
    with pytest.raises(WorldError, match="already exists"):
        build(done, str(dumps / "truthy.nt"))


def test_one_build_at_a_time(dumps, tmp_path):
    import fcntl

    world = tmp_path / "locked"
    world.mkdir()
    with open(world / ".build.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another build holds the folder
        with pytest.raises(WorldError, match="another hqa world build is writing"):
            build(world, str(dumps / "truthy.nt"))
    build(world, str(dumps / "truthy.nt"))
    assert open_world(world).name == "locked" and not (world / ".build.lock").exists()


def test_a_folder_that_is_not_a_world_is_left_alone(dumps, tmp_path):
    mine = tmp_path / "mine"
    (mine / "text").mkdir(parents=True)
    (mine / "text" / "notes.txt").write_text("keep me")
    with pytest.raises(WorldError, match="not empty and not a world"):
        build(mine, str(dumps / "truthy.nt"))
    assert (mine / "text" / "notes.txt").read_text() == "keep me"


def test_block_filter_gives_the_line_filters_world(dumps, nt_world, tmp_path, monkeypatch):
    """Blocks of canonical lines are filtered with regular expressions (NTBlockFilter); a block holding a chunk
    boundary, a checkpoint or an odd line goes line by line.  Both ways give the same store and label store, with
    and without entity / property filters."""
    from hqa.world import dumps as WK

    monkeypatch.setattr(WK, "BLOCK_BYTES", 4096)  # many blocks: most fast, those with a chunk boundary not
    used = {"fast": 0, "slow": 0}
    real = WK.NTBlockFilter.__call__

    def spy(self, block):
        out = real(self, block)
        used["fast" if out is not None else "slow"] += 1
        return out

    monkeypatch.setattr(WK.NTBlockFilter, "__call__", spy)
    world = tmp_path / "blocks"
    build(world, str(dumps / "truthy.nt.gz"), chunk_triples=1000)
    assert used["fast"] > 5
    assert store_triples(world / "kg") == store_triples(nt_world / "kg")
    assert label_rows(world / "labels.sqlite") == label_rows(nt_world / "labels.sqlite")

    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(f"Q{i}" for i in range(1, 400, 2)))
    filtered = {}
    for name, call in (("by-block", spy), ("by-line", lambda self, block: None)):  # None: filter line by line
        monkeypatch.setattr(WK.NTBlockFilter, "__call__", call)
        filtered[name] = tmp_path / name
        build(filtered[name], str(dumps / "truthy.nt"), chunk_triples=1000, entities_file=ids,
              properties=frozenset({"P31", "P17", "P569", "P2", "P21"}))
    assert store_triples(filtered["by-block"] / "kg") == store_triples(filtered["by-line"] / "kg")
    assert label_rows(filtered["by-block"] / "labels.sqlite") == label_rows(filtered["by-line"] / "labels.sqlite")
    assert 0 < len(store_triples(filtered["by-line"] / "kg")) < len(store_triples(nt_world / "kg"))

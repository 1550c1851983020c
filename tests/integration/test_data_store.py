"""The data directory (hqa/data/store.py, ``hqa data``): pulls from a loopback origin laid out as the real origins,
mirrors tried first, resume, retries, checksums that refuse wrong or truncated files and keep the old good one, and
the one-line errors."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest

from hqa.data import store
from hqa.errors import DataError
from tests.datakit import Origin, registry_entry, serve_registry

GH = ("github", "example-org/qa-data", "0123456789abcdef0123456789abcdef01234567")
ALPHA = b'{"questions": [' + b", ".join(b'{"id": %d}' % i for i in range(5000)) + b"]}\n"  # 60 kB
BETA = b"line one\nline two\n" * 300
GAMMA = b"[" + b", ".join([b'{"id": "a1"}'] * 500) + b"]\n"


def _zip(member: str, text: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(member, text)
    return buf.getvalue()


RELEASE = _zip("test_set.jsonl", b'{"question_id": "1", "question": "q?", "answers": [{"id": "Q1", "label": "x"}]}\n')
CONTENTS = {"alpha/a.json": ALPHA, "alpha/b.txt": BETA, "gamma/g.json": GAMMA, "rel/test_set.zip": RELEASE}


def _registry() -> dict:
    return {"format": 1, "origins": store._registry()["origins"], "pack_inputs": ["alpha"], "datasets": [
        registry_entry("alpha", *GH, {"alpha/a.json": ("data/a.json", ALPHA), "alpha/b.txt": ("data/b.txt", BETA)}),
        registry_entry("gamma", *GH, {"gamma/g.json": ("data/g.json", GAMMA)}, pin=False),
        registry_entry("rel", "huggingface", "someone/Release", "fedcba9876543210fedcba9876543210fedcba98",
                       {"rel/test_set.zip": ("test_set.zip", RELEASE)}, pin=False),
        {"name": "derived", "what": "derived", "host": None, "repo": "x/y", "commit": "0" * 40, "license": "CC0",
         "files": [{"file": "derived/d.jsonl", "path": None, "size": 3, "sha256": hashlib.sha256(b"{}\n").hexdigest(),
                    "git_blob": None}]},
    ]}


def _isolate(tmp_path, monkeypatch, retries: int) -> dict:
    """The test registry, a data dir in tmp, no mirror, no config file, ``retries`` retries."""
    reg = _registry()
    monkeypatch.setattr(store, "_registry", lambda: reg)
    monkeypatch.delenv(store.MIRROR_ENV, raising=False)
    monkeypatch.setenv("HQA_PATHS__DATA", str(tmp_path / "data"))
    monkeypatch.setenv("HQA_PATHS__DATA_MIRROR", "")
    monkeypatch.setenv("HQA_HTTP__MAX_RETRIES", str(retries))
    monkeypatch.setenv("HQA_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    return reg


@pytest.fixture()
def origin(tmp_path, monkeypatch):
    """A loopback origin serving the test registry's files; data dir in tmp; no mirror; 1 retry."""
    reg = _isolate(tmp_path, monkeypatch, retries=1)
    with Origin() as o:
        serve_registry(o, reg, CONTENTS)
        monkeypatch.setenv("HQA_DATA_ORIGIN_GITHUB", o.base)
        monkeypatch.setenv("HQA_DATA_ORIGIN_HUGGINGFACE", o.base)
        yield o


def _data(tmp_path: Path) -> Path:
    return tmp_path / "data"


A_URL = f"/{GH[1]}/{GH[2]}/data/a.json"
G_URL = f"/{GH[1]}/{GH[2]}/data/g.json"


def test_pull_from_origin_then_present(origin, tmp_path):
    got = store.pull(["alpha"], progress=False)
    assert got == {"alpha/a.json": "origin", "alpha/b.txt": "origin"}
    assert (_data(tmp_path) / "alpha/a.json").read_bytes() == ALPHA
    assert store.pull(["alpha"], progress=False) == {"alpha/a.json": "present", "alpha/b.txt": "present"}
    assert origin.count(A_URL) == 1  # the second pull checked the file, fetched nothing


def test_mirror_folder_is_tried_before_origin(origin, tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    (mirror / "alpha").mkdir(parents=True)
    (mirror / "alpha/a.json").write_bytes(ALPHA)  # b.txt only at the origin
    monkeypatch.setenv(store.MIRROR_ENV, str(mirror))
    assert store.pull(["alpha"], progress=False) == {"alpha/a.json": "mirror", "alpha/b.txt": "origin"}
    assert origin.count(A_URL) == 0


def test_mirror_url_in_data_dir_layout(origin, tmp_path, monkeypatch):
    origin.files["/m/alpha/a.json"] = ALPHA
    origin.files["/m/alpha/b.txt"] = BETA
    monkeypatch.setenv("HQA_PATHS__DATA_MIRROR", origin.base + "/m")
    assert set(store.pull(["alpha"], progress=False).values()) == {"mirror"}
    assert origin.count(A_URL) == 0


def test_404_everywhere_is_one_line_naming_the_dataset_and_both_ways(origin, tmp_path):
    origin.faults[A_URL] = ["404"]
    with pytest.raises(DataError) as err:
        store.pull(["alpha"], progress=False)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("dataset alpha is not in") and "hqa data pull alpha" in msg
    assert "HQA_DATA_MIRROR" in msg and "HTTP 404" in msg
    assert origin.count(A_URL) == 1  # a 404 is not retried


def test_no_network_no_mirror(tmp_path, monkeypatch):
    _isolate(tmp_path, monkeypatch, retries=0)
    with Origin() as o:
        closed = o.base  # a port nothing listens on once the server is gone
    monkeypatch.setenv("HQA_DATA_ORIGIN_GITHUB", closed)
    with pytest.raises(DataError) as err:
        store.require("gamma/g.json")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("dataset gamma is not in")
    assert "hqa data pull gamma" in msg and "HQA_DATA_MIRROR" in msg and "paths.data_mirror" in msg


def test_checksum_mismatch_refused_old_good_file_kept(origin, tmp_path):
    store.pull(["alpha"], progress=False)
    good = _data(tmp_path) / "alpha/a.json"
    # the registry moves on (a new pin) and the origin now serves bytes that do not match it
    reg = store._registry()
    reg["datasets"][0]["files"][0]["sha256"] = hashlib.sha256(ALPHA + b" ").hexdigest()
    origin.faults[A_URL] = ["wrong", "wrong"]
    with pytest.raises(DataError) as err:
        store.pull(["alpha"], progress=False)
    assert "\n" not in str(err.value) and "SHA-256 of the download differs" in str(err.value)
    assert "previous copy is kept" in str(err.value)
    assert good.read_bytes() == ALPHA
    assert origin.count(A_URL) == 3  # the first pull, then one try and one retry
    assert not list(good.parent.glob("tmp*")) and not good.with_name("a.json.part").exists()


def test_truncated_body_refused(origin, tmp_path):
    origin.faults[A_URL] = ["truncate", "truncate"]
    with pytest.raises(DataError) as err:
        store.pull(["alpha"], progress=False)
    assert f"{len(ALPHA) // 2} bytes, not the registered {len(ALPHA)}" in str(err.value)
    assert not (_data(tmp_path) / "alpha/a.json").exists()


def test_truncated_then_good_is_retried(origin, tmp_path):
    origin.faults[A_URL] = ["truncate"]
    store.pull(["alpha"], progress=False)
    assert (_data(tmp_path) / "alpha/a.json").read_bytes() == ALPHA


def test_connection_drop_mid_file_resumes_with_range(origin, tmp_path):
    origin.faults[A_URL] = ["drop"]
    store.pull(["alpha"], progress=False)
    assert (_data(tmp_path) / "alpha/a.json").read_bytes() == ALPHA
    ranges = [r for p, r, _t in origin.requests if p == A_URL]
    assert len(ranges) == 2 and ranges[0] is None
    start = int(ranges[1].removeprefix("bytes=").rstrip("-"))  # the second try asked for the rest only
    assert 0 < start <= len(ALPHA) // 2


@pytest.fixture()
def pauses(monkeypatch) -> list[float]:
    """The waits between download tries, recorded instead of slept."""
    waited: list[float] = []
    monkeypatch.setattr(store, "_pause", waited.append)
    return waited


def test_429_retry_after_honoured(origin, tmp_path, pauses):
    origin.faults[A_URL] = ["429"]
    store.pull(["alpha"], progress=False)
    assert origin.count(A_URL) == 2 and pauses == [3.0]  # waited the server's Retry-After: 3
    assert (_data(tmp_path) / "alpha/a.json").read_bytes() == ALPHA


def test_a_retry_after_past_the_cap_gives_up_on_the_source_at_once(origin, tmp_path, pauses):
    """A mirror answering 429 with ``Retry-After: 3600`` is not waited for (hqa slept the hour): the source is given
    up at once, as the live sources do past ``http.retry_after_cap``."""
    origin.faults[A_URL] = ["429-hour"] * 3
    with pytest.raises(DataError) as err:
        store.pull(["alpha"], progress=False)
    assert pauses == [] and origin.count(A_URL) == 1
    assert "asking to wait 3600s (Retry-After), beyond the 60s cap (http.retry_after_cap)" in str(err.value)


def test_a_failing_source_is_asked_max_retries_plus_one_times_not_their_product(origin, tmp_path, pauses,
                                                                                monkeypatch):
    """One count of attempts per file and source (pooch's retries and urllib3's multiplied to 25 before)."""
    monkeypatch.setenv("HQA_HTTP__MAX_RETRIES", "4")
    origin.faults[A_URL] = ["500"] * 30
    with pytest.raises(DataError) as err:
        store.pull(["alpha"], progress=False)
    assert origin.count(A_URL) == 5 and len(pauses) == 4
    assert "HTTP 500; gave up after 5 attempts" in str(err.value) and "\n" not in str(err.value)


def test_an_endless_body_is_refused_at_the_registered_size_and_its_part_removed(origin, tmp_path):
    """200 with no Content-Length and a body that never ends (it grew a 10,827-byte file's part to 9.3 GB)."""
    origin.faults[A_URL] = ["endless"] * 3
    with pytest.raises(DataError) as err:
        store.pull(["alpha"], progress=False)
    msg = str(err.value)
    assert "\n" not in msg and "alpha/a.json" in msg and origin.base + A_URL in msg
    assert f"the body goes past its registered size of {len(ALPHA)} bytes (the partial download is removed)" in msg
    assert origin.count(A_URL) == 1  # refused, not retried
    assert not (_data(tmp_path) / "alpha/a.json.part").exists() and not (_data(tmp_path) / "alpha/a.json").exists()


def test_a_file_of_unknown_size_is_bounded_by_the_ceiling(origin, tmp_path, monkeypatch):
    monkeypatch.setenv("HQA_DATA__MAX_FILE_MB", "1")
    origin.faults[G_URL] = ["endless"]
    with pytest.raises(DataError) as err:
        store.pull(["gamma"], progress=False)
    assert "past the 1000000-byte ceiling for a file of unknown size (data.max_file_mb)" in str(err.value)
    assert not list(_data(tmp_path).rglob("*.part")) and not (_data(tmp_path) / store.CHECKSUMS).exists()


def test_a_part_already_past_the_size_is_discarded_not_resumed(origin, tmp_path):
    part = _data(tmp_path) / "alpha" / "a.json.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"x" * (len(ALPHA) + 10))  # what an endless body left before the bound
    store.pull(["alpha"], progress=False)
    assert (_data(tmp_path) / "alpha/a.json").read_bytes() == ALPHA
    assert [r for p, r, _t in origin.requests if p == A_URL] == [None]  # no Range past the file's end


def test_unpinned_file_git_blob_checked_and_sha256_recorded(origin, tmp_path):
    origin.faults[G_URL] = ["wrong", "wrong"]
    with pytest.raises(DataError) as err:
        store.pull(["gamma"], progress=False)
    assert "git blob id" in str(err.value)
    assert not (_data(tmp_path) / "gamma/g.json").exists()
    store.pull(["gamma"], progress=False)
    recorded = json.loads((_data(tmp_path) / store.CHECKSUMS).read_text())
    assert recorded == {"gamma/g.json": hashlib.sha256(GAMMA).hexdigest()}
    f = store.dataset("gamma").files[0]
    assert store.file_status(f, _data(tmp_path)) == "ok (recorded)"
    # checked ever after: a damaged copy is WRONG and the next pull repairs it from the origin
    (_data(tmp_path) / "gamma/g.json").write_bytes(GAMMA[:-1])
    assert store.file_status(f, _data(tmp_path)) == "WRONG"
    assert store.pull(["gamma"], progress=False) == {"gamma/g.json": "origin"}
    assert (_data(tmp_path) / "gamma/g.json").read_bytes() == GAMMA


def test_huggingface_resolve_layout(origin, tmp_path):
    from hqa.data.datasets import load_compmix_release

    reg = store._registry()
    reg["datasets"][2]["files"][0]["file"] = "compmix-release/test_set.zip"
    origin.files.clear()
    serve_registry(origin, reg, {**CONTENTS, "compmix-release/test_set.zip": RELEASE})
    records = load_compmix_release("test")
    assert [(r.id, r.answers, r.answer_ids) for r in records] == [("compmix:1", ("x",), ("Q1",))]
    assert any(p.startswith("/datasets/someone/Release/resolve/") for p, _r, _t in origin.requests)


def test_require_fetches_on_first_use_with_one_line(origin, tmp_path, capsys):
    path = store.require("alpha/b.txt")
    assert path.read_bytes() == BETA
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fetching dataset alpha (CC BY 4.0") and "first use" in lines[0]
    store.require("alpha/b.txt")
    assert capsys.readouterr().err == ""  # present: nothing said, nothing fetched


def test_derived_file_needs_a_mirror(origin, tmp_path, monkeypatch):
    with pytest.raises(DataError, match="derived and has no public origin"):
        store.pull(["derived"], progress=False)
    mirror = tmp_path / "mirror"
    (mirror / "derived").mkdir(parents=True)
    (mirror / "derived/d.jsonl").write_bytes(b"{}\n")
    monkeypatch.setenv(store.MIRROR_ENV, str(mirror))
    assert store.pull(["derived"], progress=False) == {"derived/d.jsonl": "mirror"}


def test_a_mirror_link_out_of_its_folder_is_not_followed_and_nothing_wrong_is_pinned(origin, tmp_path, monkeypatch):
    """``rel/test_set.zip -> /etc/passwd`` in a mirror folder: it was copied and its SHA-256 pinned on first use, so
    that later pulls called it "already present and checked".  Now a link out of the mirror is refused, and a file is
    pinned on first use only when it also parses as its format (this zip opens)."""
    outside = tmp_path / "elsewhere" / "passwd"
    outside.parent.mkdir()
    outside.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")
    mirror = tmp_path / "mirror"
    (mirror / "rel").mkdir(parents=True)
    (mirror / "rel" / "test_set.zip").symlink_to(outside)
    monkeypatch.setenv(store.MIRROR_ENV, str(mirror))
    origin.faults[f"/datasets/someone/Release/resolve/{store.dataset('rel').commit}/test_set.zip"] = ["404"] * 2
    with pytest.raises(DataError) as err:
        store.pull(["rel"], progress=False)
    assert f"a link to {outside}, outside the mirror folder (not followed)" in str(err.value)
    assert not (_data(tmp_path) / "rel/test_set.zip").exists() and not (_data(tmp_path) / store.CHECKSUMS).exists()
    # the same bytes as a regular file of the mirror: refused, because they are no zip
    (mirror / "rel" / "test_set.zip").unlink()
    (mirror / "rel" / "test_set.zip").write_bytes(outside.read_bytes())
    with pytest.raises(DataError, match="not a readable zip file"):
        store.pull(["rel"], progress=False)
    assert not (_data(tmp_path) / store.CHECKSUMS).exists()
    # a link that stays inside the mirror folder is followed; the good zip is pinned
    (mirror / "rel" / "test_set.zip").unlink()
    (mirror / "blobs").mkdir()
    (mirror / "blobs" / "release.zip").write_bytes(RELEASE)
    (mirror / "rel" / "test_set.zip").symlink_to(mirror / "blobs" / "release.zip")
    assert store.pull(["rel"], progress=False) == {"rel/test_set.zip": "mirror"}
    recorded = json.loads((_data(tmp_path) / store.CHECKSUMS).read_text())
    assert recorded == {"rel/test_set.zip": hashlib.sha256(RELEASE).hexdigest()}


def test_cli_data_list_and_pull(origin, tmp_path, capsys):
    from hqa.cli.entry import main

    assert main(["data", "pull", "alpha", "--quiet"]) == 0
    assert "2 from their origin" in capsys.readouterr().out
    assert main(["data", "list", "--json", "--verify"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["datasets"]}
    assert rows["alpha"]["present"] == 2 and rows["alpha"]["sha256"] == "2/2 pinned"
    assert rows["gamma"]["present"] == 0 and rows["gamma"]["sha256"] == "recorded on first download"
    assert rows["alpha"]["origin"].startswith("example-org/qa-data @ 0123456789ab")
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    alpha = next(line for line in out.splitlines() if line.startswith("alpha "))
    assert alpha.split()[1] == "2/2" and "2/2 pinned" in alpha and "[CC BY 4.0]" in alpha
    assert main(["data", "pull", "nosuch"]) != 0
    assert "unknown dataset 'nosuch'" in capsys.readouterr().err
    origin.faults[G_URL] = ["404"]  # gamma cannot be fetched; the datasets after it still are
    assert main(["data", "pull", "gamma", "rel", "--quiet"]) == 2  # a refusal, as every other one (it was 1)
    captured = capsys.readouterr()
    assert captured.err.count("hqa: error: dataset gamma") == 1 and "not fetched: gamma" in captured.out
    assert (tmp_path / "data" / "rel" / "test_set.zip").read_bytes() == RELEASE
    assert not list((tmp_path / "data").rglob("*.lock"))  # no lock left beside any file, pulled or not


def test_interrupted_pull_resumes_in_the_next_one(origin, tmp_path):
    """A pull killed mid-file leaves ``<file>.part``; the next pull asks only for the rest (HTTP Range)."""
    part = _data(tmp_path) / "alpha" / "a.json.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(ALPHA[:1000])
    store.pull(["alpha"], progress=False)
    assert (_data(tmp_path) / "alpha/a.json").read_bytes() == ALPHA and not part.exists()
    assert [r for p, r, _t in origin.requests if p == A_URL] == ["bytes=1000-"]

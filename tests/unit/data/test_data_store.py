"""The data directory (hqa/data/store.py, ``hqa data``): pulls from a loopback origin laid out as the real origins,
mirrors tried first, resume, retries, checksums that refuse wrong or truncated files and keep the old good one, and
the one-line errors."""

from __future__ import annotations

import hashlib


from hqa.data import store
from tests.datakit import git_blob


def test_origin_urls_have_the_real_layouts():
    """The registry's datasets resolve to raw.githubusercontent.com / Hugging Face resolve URLs at the pinned commit."""
    ds = store.dataset("mintaka/test")
    assert store.origin_url(ds, ds.files[0]) == ("https://raw.githubusercontent.com/amazon-science/mintaka/"
                                                 "b6146ffb41562803c45df3c028b4cdad8c09dd4d/data/mintaka_test.json")
    ds = store.dataset("compmix-release/test")
    assert store.origin_url(ds, ds.files[0]) == ("https://huggingface.co/datasets/pchristm/CompMix/resolve/"
                                                 "398eb2b9dec2b14fba6f86789da63414b3eecd89/test_set.zip")
    ds = store.dataset("qald9plus-wikidata/test")
    assert ds.files[0].git_blob == "663dd06c93eb0a50bb2d6ec2452f69be709c3655" and ds.files[0].sha256 is None


def test_real_registry_is_consistent():
    """Every registry file has a unique data-dir name; pinned ones carry size, SHA-256 and git blob; every dataset
    but the derived excerpt has an origin; the pack's inputs exist."""
    names = [f.file for d in store.datasets().values() for f in d.files]
    assert len(names) == len(set(names)) == 51
    for d in store.datasets().values():
        assert d.license and len(d.commit) == 40
        for f in d.files:
            assert (f.sha256 is None) == (f.size is None)
            if d.host == "github":
                assert f.git_blob and f.path
    assert [d.name for d in store.datasets().values() if d.host is None] == ["mintaka-excerpt"]
    assert set(store.pack_inputs()) <= set(store.datasets())


def test_real_registry_pins_agree_with_the_pulled_files():
    """Every pinned file, pulled (from the mirror here, the origin elsewhere): its size, SHA-256 and git blob id —
    the origin repository's own id of the file at the pinned commit — all describe the same bytes."""
    for d in store.datasets().values():
        for f in d.files:
            if f.sha256:
                data = store.require(f.file).read_bytes()
                assert hashlib.sha256(data).hexdigest() == f.sha256 and len(data) == f.size, f.file
                if f.git_blob:
                    assert git_blob(data) == f.git_blob, f.file

"""Knowledge pack: extraction rules on hand-made records, then the real build from the recorded sources (pulled
into the data directory; from the mirror here)."""

from pathlib import Path

import pytest


def test_interrupted_build_keeps_previous_pack(tmp_path, monkeypatch):
    from hqa.world import pack as P

    dest = tmp_path / "pack"
    dest.mkdir()
    (dest / "marker").write_text("old")

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(P, "write_pack", boom)
    with pytest.raises(KeyboardInterrupt):
        P.build_pack(dest, leads=None)  # the recorded sources: the swap is what is tested
    assert (dest / "marker").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["pack"]  # no temp folder left behind


def test_pack_build_measures_coverage_on_the_new_pack_before_swapping_it_in(tmp_path, monkeypatch):
    """Coverage belongs to the build: measured on the freshly written pack (not on whatever is at the destination),
    written into its manifest before the swap, so a finished pack always carries its own numbers."""
    import json

    import hqa.data.coverage
    from hqa.world.pack import build_pack

    seen = []

    def fake_coverage(pack_dir):
        seen.append(Path(pack_dir))
        assert (Path(pack_dir) / "entities.jsonl").exists()
        return {"qald10": {"questions": 394, "answer_entity_covered": len(seen)}}

    monkeypatch.setattr(hqa.data.coverage, "coverage", fake_coverage)
    dest = tmp_path / "pack"
    manifest = build_pack(dest, coverage=True, leads=None)
    assert len(seen) == 1 and seen[0] != dest and not seen[0].exists()  # the temp pack, since swapped in
    assert manifest["coverage"] == json.loads((dest / "manifest.json").read_text())["coverage"]
    assert "coverage" not in build_pack(dest, coverage=False, leads=None)

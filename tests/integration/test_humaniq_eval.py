"""HumanIQ's evaluation as published (hqa.reports, hqa.data.authors_runs): Table 5 per benchmark and Aggregated,
Figure 4's three- vs two-source agreement, Table 9's automatic error categories, RQ8's library statistics, the
authors' own GPT-4 outputs imported as runs, and old prediction rows still rendering.  Expected values are worked
out by hand in the comments."""

from __future__ import annotations

import json

import pytest

from hqa.data.store import require_dataset
from hqa.errors import DataError
from hqa.reports.summary import write_report

require_dataset("humaniq-runs")
HUMANIQ = require_dataset("humaniq-late-fusion") / "humaniq"  # the pulled HumanIQ repository files (a mirror here)
COMPMIX_RUN = HUMANIQ / "long_data" / "11-09-2023_21_42_52_compmix_answer.json"
COMPMIX_REPLACED = HUMANIQ / "long_data" / "compmix_replaced_longanswer_gpt4.json"


# -- the authors' own runs ------------------------------------------------------------------------------------------
def test_import_compmix_long_data_rows_match_a_hand_check(tmp_path):
    from hqa.data.authors_runs import import_run

    info = import_run([COMPMIX_RUN, COMPMIX_REPLACED], tmp_path / "run")
    rows = {r["question"]: r for r in map(json.loads, (tmp_path / "run" / "predictions.jsonl").open())}
    # 200 records, 68 of them empty; the replacement file answers 6 list questions: 2 empty positions and 4 where
    # the run had asked another question -> 200 rows, 66 still without output
    assert (len(rows), sum(1 for r in rows.values() if r["error"])) == (200, 66)
    assert info["counts"]["empty"] == 68 and info["kind"] == "long_data" and info["benchmark"] == "compmix"
    f9 = rows["When publication date of the movie F9?"]
    # gold "25 June 2021"; the long answer says "released on June 25, 2021": same date after normalisation, so
    # recall 1; it is a sentence, so EM and Hits@1 are 0; only the memory answered
    assert (f9["id"], f9["gold"]) == ("compmix:7884", ["25 June 2021"])
    assert (f9["scores"]["recall"], f9["scores"]["em"], f9["scores"]["hits1"]) == (1.0, 0.0, 0.0)
    assert (f9["trace"]["answers"]["text"], f9["trace"]["answers"]["kg"]) == (None, None)
    saha = rows["Louis Saha played for?"]
    # gold is his national team; the answer lists clubs -> recall 0
    assert saha["gold"] == ["France national association football team"] and saha["scores"]["recall"] == 0.0
    # an empty record at list position 3 gets its question from compmix.txt and is an error row
    assert rows["When was Patrick Stewart born?"]["error"] and rows["When was Patrick Stewart born?"]["answer"] == ""
    # the replacement file's record replaces the run's record at its list position ("The Ring" there is gone)
    assert rows["How many Pulitzer Prizes has John Updike won?"]["trace"]["source_file"] == COMPMIX_REPLACED.name
    assert "Who distributed the movie The Ring?" not in rows
    s = write_report(tmp_path / "run")
    # per source over the 200: text answered by 76 (38.0%), 60 of them correct (79.0%)
    assert (s["sources"]["per_source"]["text"]["answered"], s["sources"]["per_source"]["text"]["correct"]) == (76, 60)
    assert s["table5"]["compmix"]["text"]["re"] == 38.0 and s["table5"]["compmix"]["text"]["prec"] == 79.0
    md = (tmp_path / "run" / "summary.md").read_text()
    assert "| paper GPT-4 text | 71.5 | 92.0 | 60.1 |" in md and "Imported from the authors' runs" in md
    with pytest.raises(DataError, match="exists"):  # an existing import is not overwritten silently
        import_run([COMPMIX_RUN], tmp_path / "run")


def test_cli_report_import(tmp_path, capsys):
    from hqa.cli.entry import main

    out = tmp_path / "cli"
    assert main(["report", "import", str(COMPMIX_RUN), str(COMPMIX_REPLACED), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "HumanIQ Table 5" in text and "HumanIQ authors' GPT-4 run (long_data, compmix)" in text
    assert main(["report", "import", str(COMPMIX_RUN), "--out", str(out), "--fresh", "--skip-empty"]) == 0
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 132  # the 132 non-empty records
    assert main(["report", "show", str(out)]) == 0

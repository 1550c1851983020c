"""DIVKNOWQA's tables over hqa runs (hqa/reports/divknowqa.py, ``hqa report divknowqa``): arms named as Table 3 /
Table 6 name them from the options a run was evaluated with, Table 5's QID / QID+REL / QID* from the traces, and
Table 4's overlap with a closed-book run.  Expected values are worked out by hand in the comments."""

from __future__ import annotations

import json
from pathlib import Path


from hqa.reports.divknowqa import arm_name


def test_reproduce_script_runs_every_paper_arm_with_valid_options(tmp_path):
    """scripts/reproduce-detllm with a recording stand-in for ``hqa``: each dataset gets every Table 3 arm (Bamboogle
    also Table 6's oracles), a closed-book run, and one ``report divknowqa`` over them; every kwargs is a valid
    DETLLM configuration that the report names as the paper does."""
    import os
    import shlex
    import subprocess

    from hqa.artifacts.store import check_program_kwargs
    from hqa.programs.detllm import DETLLM

    log = tmp_path / "calls.txt"
    stub = tmp_path / "hqa-stub"
    stub.write_text(f'#!/usr/bin/env bash\nprintf "%q " "$@" >> {log}\necho >> {log}\n')
    stub.chmod(0o755)
    script = Path(__file__).resolve().parents[2] / "scripts" / "reproduce-detllm"
    subprocess.run([str(script), "--limit", "2", "--out", str(tmp_path / "out")], check=True, capture_output=True,
                   env={**os.environ, "HQA": str(stub)})
    calls = [shlex.split(line) for line in log.read_text().splitlines()]
    by_dataset: dict[str, list[str]] = {}
    for argv in calls:
        if argv[0] != "evaluate":
            continue
        args = dict(zip(argv[1::2], argv[2::2]))
        assert args["--limit"] == "2"
        kwargs = json.loads(args.get("--program-kwargs", "{}"))
        if args["--program"] == "detllm":
            check_program_kwargs("detllm", kwargs, "test")
            DETLLM(**kwargs)
        by_dataset.setdefault(args["--dataset"], []).append(arm_name(args["--program"], kwargs))
    table3 = {"DETLLM", "Closed Book"} | {f"{s} {b}" for s in ("w/o SPARQL", "w/ SPARQL")
                                         for b in ("Text-KB(Sparse)", "Text-KB(Dense)", "Text(Sparse)-KB(Sparse)")}
    table3.add("w/o SPARQL Text(Dense)-KB(Sparse)")
    assert set(by_dataset["compmix/test"]) == table3
    assert set(by_dataset["bamboogle"]) == table3 | {"Oracle_All", "Oracle_hop1", "Oracle_hop2"}
    reports = [argv for argv in calls if argv[:2] == ["report", "divknowqa"]]
    assert len(reports) == 2 and all("--closed-book" in argv and len(argv) >= 12 for argv in reports)

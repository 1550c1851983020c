"""``hqa study`` and ``hqa results`` over the loopback LM stand-in (standins/openai_lm.py; issue 54): a study of
2 programs × 2 datasets × 2 LM configurations that answer differently, checked row by row against metrics,
intervals and a McNemar p-value computed here by hand; the dry run's estimate against the calls the run then makes;
Ctrl-C of a real ``hqa study`` process and its resume; a failing cell (an LM that answers 500, a dataset that does
not exist) beside cells that finish; the HTML page in Chromium."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import default_sigint
from prockit import _chromium, clean_env, interrupt_when

from hqa.data.datasets import QARecord

# -- two toy benchmarks, registered for the in-process study: a CompMix-like one (Hits@1) and a QALD-like (Macro F1
# QALD).  LM "a" answers the question's last capitalised word, LM "b" always "Libreville".
COMPMIX = [("What is the capital of Gabon?", ["Libreville"]), ("Which city is Libreville?", ["Libreville"]),
           ("Which river flows through Cairo?", ["Nile"]), ("Spell Tokyo?", ["Tokyo"]), ("Spell Lima?", ["Lima"]),
           ("Spell Oslo?", ["Oslo"]), ("Spell Rome?", ["Rome"]), ("Spell Bern?", ["Bern"])]
#: Hits@1 per question, by hand: a = the last capitalised word, b = Libreville
COMPMIX_A = [0, 1, 0, 1, 1, 1, 1, 1]
COMPMIX_B = [1, 1, 0, 0, 0, 0, 0, 0]
QALD = [("What is the capital of Gabon?", ["Libreville"]), ("Spell Tokyo?", ["Tokyo", "Kyoto"]),
        ("Which river flows through Cairo?", ["Nile"]), ("Spell Lima?", ["Lima"])]
#: per question (precision, recall) by GERBIL's rules, by hand
QALD_A = [(0, 0), (1, 0.5), (0, 0), (1, 1)]
QALD_B = [(1, 1), (0, 0), (0, 0), (0, 0)]


def _records(name, items):
    return [QARecord(id=f"{name}:{i}", question=q, answers=tuple(g), answer_ids=(), dataset=name)
            for i, (q, g) in enumerate(items)]


@pytest.fixture()
def toy_datasets(monkeypatch):
    from hqa.data import datasets

    monkeypatch.setitem(datasets.DATASET_SPECS, "compmix-toy", lambda: _records("compmix-toy", COMPMIX))
    monkeypatch.setitem(datasets.DATASET_SPECS, "qald-toy", lambda: _records("qald-toy", QALD))


@pytest.fixture(scope="module")
def two_lms():
    from standins.openai_lm import SCRIPTS, Behaviour, start

    a = start(Behaviour(latency=0.05, script={**SCRIPTS["default"], "answer": "{entity}"}))
    b = start(Behaviour(latency=0.05, script={**SCRIPTS["default"], "answer": "Libreville"}))
    yield a, b
    a.stop()
    b.stop()


def study_text(a, b, name="toy", datasets=("compmix-toy", "qald-toy"), extra="", threads=4, limit=None):
    lim = f"\nlimit = {limit}" if limit else ""
    data = "".join(f'\n[[dataset]]\nspec = "{d}"{lim}\n' for d in datasets)
    return f"""
[study]
name = "{name}"
threads = {threads}

[[program]]
name = "closedbook"

[[program]]
name = "cot"
{data}
[[lm]]
name = "a"
provider = "openai_compatible"
model = "model-a"
api_base = "{a.api_base}"
price_in = 1.0
price_out = 2.0

[[lm]]
name = "b"
provider = "openai_compatible"
model = "model-b"
api_base = "{b.api_base}"
price_in = 0.5
price_out = 4.0
{extra}"""


def toml_study(name, threads, programs, datasets, lms):
    """A study file: ``programs`` names, ``datasets`` (spec, limit or None), ``lms`` (name, api_base)."""
    out = [f'[study]\nname = "{name}"\nthreads = {threads}\n']
    out += [f'[[program]]\nname = "{p}"\n' for p in programs]
    out += [f'[[dataset]]\nspec = "{d}"\n' + (f"limit = {n}\n" if n else "") for d, n in datasets]
    out += [f'[[lm]]\nname = "{n}"\nprovider = "openai_compatible"\nmodel = "standin"\napi_base = "{url}"\n'
            for n, url in lms]
    return "\n".join(out)


def _load(tmp_path, text):
    from hqa.schemas.study import load_study

    path = tmp_path / "study.toml"
    path.write_text(text)
    return load_study(path)


def _exact_mcnemar(b, c):
    n = b + c
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n)


def _numpy_bootstrap(vectors, stat, seed=1, n=20000):
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(v, float) for v in vectors]
    idx = rng.integers(0, len(arrays[0]), size=(n, len(arrays[0])))
    values = stat(*[a[idx] for a in arrays])
    return np.percentile(values, [2.5, 97.5])


def _qald_f1(pr):
    p = sum(x for x, _ in pr) / len(pr)
    r = sum(y for _, y in pr) / len(pr)
    return 2 * p * r / (p + r) if p + r else 0.0


def test_study_rows_match_hand_computed_metrics_intervals_and_mcnemar(settings_for, tmp_path, toy_datasets, two_lms):
    """8 cells; each row's headline, interval, cost and published value; paired against closedbook under LM a."""
    import mlflow
    from scipy.stats import bootstrap

    from hqa.jobs.study import run_study
    from hqa.reports.results import results_table
    from hqa.scoring.stats import harmonic_f1

    a, b = two_lms
    settings = settings_for(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", lm_cache=False, lm_num_retries=0)
    study = _load(tmp_path, study_text(a, b))
    done = run_study(settings, study, out=tmp_path / "study", progress=False)
    assert not done.failed and len(done.cells) == 8
    table = results_table([c.folder for c in done.cells], baseline="label=closedbook,lm=openai_compatible:model-a")
    rows = {(r["label"], r["dataset"], r["lm"].split(":")[1]): r for r in table["rows"]}
    assert len(rows) == 8
    for program in ("closedbook", "cot"):
        for lm, hits, qald in (("model-a", COMPMIX_A, QALD_A), ("model-b", COMPMIX_B, QALD_B)):
            row = rows[(program, "compmix-toy", lm)]
            assert (row["metric"], row["n"], row["value"]) == ("hits1", 8, round(sum(hits) / 8, 4))
            ci = bootstrap((np.asarray(hits, float),), np.mean, n_resamples=2000, method="percentile",
                           rng=np.random.default_rng(0)).confidence_interval
            assert (row["ci_low"], row["ci_high"]) == (round(ci.low, 4), round(ci.high, 4))
            lo, hi = _numpy_bootstrap([hits], lambda x: x.mean(axis=-1))  # an independent resampling
            assert abs(row["ci_low"] - lo) <= 0.13 and abs(row["ci_high"] - hi) <= 0.13
            assert row["coverage"] == 1.0 and row["failure_rate"] == 0.0 and row["lm_calls_per_q"] == 1.0
            folder_rows = [json.loads(x) for x in (Path(row["folder"]) / "predictions.jsonl").read_text().splitlines()]
            price_in, price_out = (1.0, 2.0) if lm == "model-a" else (0.5, 4.0)
            cost = sum(r["prompt_tokens"] * price_in + r["completion_tokens"] * price_out for r in folder_rows) / 8e6
            assert row["cost_per_q"] == pytest.approx(cost)
            q = rows[(program, "qald-toy", lm)]
            assert (q["metric"], q["n"], q["value"]) == ("qald_f1", 4, round(_qald_f1(qald), 4))
            lo, hi = _numpy_bootstrap(list(zip(*qald)), lambda p, r: harmonic_f1(p, r))
            assert abs(q["ci_low"] - lo) <= 0.2 and abs(q["ci_high"] - hi) <= 0.2
    # McNemar: LM b's rows against closedbook under LM a, discordant pairs counted by hand
    for program in ("closedbook", "cot"):
        row = rows[(program, "compmix-toy", "model-b")]
        only_a = sum(1 for x, y in zip(COMPMIX_A, COMPMIX_B) if x and not y)
        only_b = sum(1 for x, y in zip(COMPMIX_A, COMPMIX_B) if y and not x)
        assert (only_a, only_b) == (5, 1)
        assert row["test"] == "McNemar exact" and row["discordant"] == [only_a, only_b]
        assert row["p"] == pytest.approx(_exact_mcnemar(only_a, only_b)) == pytest.approx(14 / 64)
        assert row["diff"] == pytest.approx((sum(COMPMIX_B) - sum(COMPMIX_A)) / 8)
    assert rows[("cot", "qald-toy", "model-b")]["test"] == "paired permutation"
    ps = [r["p"] for r in table["rows"] if r.get("p") is not None]
    assert len(ps) == 6 and all(r.get("p_bh") is not None and r["p_bh"] >= r["p"] for r in table["rows"] if "p" in r)
    # the papers' number beside the row, with what differs
    cb = rows[("closedbook", "compmix-toy", "model-a")]
    assert cb["published"] == 0.585 and "other LM (gpt-4-0314)" in cb["settings_differ"]
    assert "HumanIQ Table 3" in cb["published_source"]
    # one MLflow parent with a child run per cell, each cross-linked from its folder
    mlflow.set_tracking_uri(settings.tracking_uri)
    children = mlflow.search_runs(search_all_experiments=True, filter_string=f"tags.mlflow.parentRunId = '{done.run_id}'",
                                  output_format="list")
    assert len(children) == 8 and {r.info.status for r in children} == {"FINISHED"}
    assert {r.info.run_id for r in children} == {row["mlflow_run_id"] for row in table["rows"]}
    assert {p.name for p in done.table.values()} >= {"results.md", "results.html", "results.eee.json"}


def test_dry_run_estimate_is_within_a_quarter_of_the_calls_the_run_makes(settings_for, tmp_path, toy_datasets,
                                                                        two_lms):
    from hqa.jobs.study import run_study

    a, b = two_lms
    settings = settings_for(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", lm_cache=False, lm_num_retries=0)
    study = _load(tmp_path, study_text(a, b))
    dry = run_study(settings, study, out=tmp_path / "study", dry_run=True, probe=1, progress=False)
    total = dry.estimate[-1]["total"]
    assert total["left"] == 8 * 2 + 8 * 2 + 4 * 2 + 4 * 2 - 8  # every cell's questions but its probe
    for server in (a, b):
        server.state.reset()
    run_study(settings, study, out=tmp_path / "study", progress=False)
    made = sum(s.state.stats["calls"] for s in (a, b))
    assert made == total["left"]  # the probes' rows were kept: only the rest was asked
    assert abs(total["lm_calls"] - made) <= 0.25 * made


def test_a_failing_cell_is_one_line_and_the_others_finish(tmp_path):
    """A third LM answers every request with a 500 and one dataset does not exist: their cells fail, each named in
    one line; the other cells' rows are complete and in the table."""
    from standins.openai_lm import Behaviour, start

    good, bad = start(Behaviour(latency=0.05)), start(Behaviour(latency=0.05, error_rate=1.0, error_status=500))
    try:
        path = tmp_path / "study.toml"
        path.write_text(toml_study("failing", 2, ["closedbook"], [("compmix/test", 8), ("no-such-set", None)],
                                   [("good", good.api_base), ("bad", bad.api_base)]))
        proc = subprocess.run([sys.executable, "-m", "hqa.cli", "study", str(path), "--out", str(tmp_path / "out")],
                              capture_output=True, text=True, cwd=tmp_path, timeout=600,
                              env=clean_env(HQA_PATHS__ARTIFACTS=str(tmp_path / "artifacts"), HQA_LM__NUM_RETRIES="0",
                                            HQA_LM__CACHE="false"))
    finally:
        good.stop()
        bad.stop()
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    failed = [line for line in proc.stderr.splitlines() if line.startswith("hqa: cell ") and " failed: " in line]
    ids = sorted(line.split()[2] for line in failed)
    assert ids == ["closedbook.none.compmix_test-n8.bad.s0", "closedbook.none.no-such-set.bad.s0",
                   "closedbook.none.no-such-set.good.s0"], failed  # one line each
    # the bad cell was dropped once its first 3 questions failed (at most the 2 threads' next ones were in flight)
    assert bad.state.stats["calls"] <= 5
    rows = [json.loads(x) for x in (tmp_path / "out" / "closedbook.none.compmix_test-n8.good.s0" /
                                    "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and not any(r["error"] for r in rows)
    assert "| closedbook | none | compmix/test (8) |" in proc.stdout


def test_ctrl_c_then_resume_loses_and_duplicates_nothing(tmp_path):
    from standins.openai_lm import Behaviour, start

    lm = start(Behaviour(latency=0.4))
    out = tmp_path / "out"
    path = tmp_path / "study.toml"
    path.write_text(toml_study("sigint", 2, ["closedbook", "cot"], [("compmix/test", 6), ("bamboogle", 6)],
                               [("standin", lm.api_base)]))
    # the stand-in's response format named: the probe's own requests are not among the calls counted below
    env = clean_env(HQA_PATHS__ARTIFACTS=str(tmp_path / "artifacts"), HQA_LM__CACHE="false", HQA_LM__NUM_RETRIES="0",
                    HQA_LM__RESPONSE_FORMAT="json_schema")
    cmd = [sys.executable, "-m", "hqa.cli", "study", str(path), "--out", str(out)]

    def rows_now() -> dict[str, list[str]]:
        return {p.parent.name: p.read_text().splitlines() for p in out.glob("*/predictions.jsonl")}

    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                                preexec_fn=default_sigint)
        err, _ = interrupt_when(proc, lambda: sum(len(v) for v in rows_now().values()) >= 5, "the study")
        assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
        before = rows_now()
        n_before = sum(len(v) for v in before.values())
        assert 5 <= n_before < 24
        calls_before = lm.state.stats["calls"]
        again = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    finally:
        lm.stop()
    assert again.returncode == 0, again.stderr[-3000:]
    after = rows_now()
    assert len(after) == 4
    for cell, lines in after.items():
        assert lines[:len(before.get(cell, []))] == before.get(cell, [])  # kept as they were
        ids = [json.loads(x)["id"] for x in lines]
        assert len(ids) == len(set(ids)) == 6, cell  # nothing lost, nothing twice
    assert lm.state.stats["calls"] - calls_before == 24 - n_before  # only the missing questions were asked


def test_results_page_renders_the_table_in_chromium(settings_for, tmp_path, toy_datasets, two_lms):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    from hqa.jobs.study import run_study

    a, b = two_lms
    settings = settings_for(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", lm_cache=False, lm_num_retries=0)
    done = run_study(settings, _load(tmp_path, study_text(a, b, name="page")), out=tmp_path / "study", progress=False)
    page = done.table["html"]
    found = _chromium()
    assert found, "Debian chromium and chromium-driver are required (scripts/setup installs them)"
    opts = webdriver.ChromeOptions()
    opts.binary_location = found[0]
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,2000"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(found[1]), options=opts)
    try:
        driver.get(page.resolve().as_uri())
        rows = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                for tr in driver.find_elements(By.CSS_SELECTOR, "#results tbody tr")]
        header = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#results thead th")]
        plots = [f.get_attribute("data-benchmark") for f in driver.find_elements(By.CSS_SELECTOR, "figure.plot")]
        sizes = [f.find_element(By.TAG_NAME, "svg").size for f in driver.find_elements(By.CSS_SELECTOR, "figure.plot")]
        commands = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#commands li")]
        driver.save_screenshot("/tmp/hqa-results-page.png")
    finally:
        driver.quit()
    assert len(rows) == 8 and header[:4] == ["#", "program", "arm", "dataset (n)"]
    compmix_a = next(r for r in rows if r[1] == "closedbook" and r[3] == "compmix-toy (8)" and r[4].endswith("model-a"))
    assert compmix_a[7] == "Hits@1 0.75"
    assert plots == ["compmix", "qald"] and all(s["width"] > 100 and s["height"] > 100 for s in sizes)
    assert len(commands) == 8 and all(c.startswith("hqa evaluate --program ") for c in commands)


TRAIN = [("Spell Paris?", ["Paris"]), ("Spell Madrid?", ["Madrid"]), ("Spell Vienna?", ["Vienna"])]


def test_a_compile_arm_cell_answers_with_demos_bootstrapped_from_its_train_set(settings_for, tmp_path, toy_datasets,
                                                                               two_lms, monkeypatch):
    """A study's compile arm (``arms = ["none", "bootstrap"]``): the arm's cell compiles its program on the train set
    under the cell's LM and answers with those demos in every prompt; the uncompiled arm's prompts hold none."""
    from hqa.data import datasets
    from hqa.jobs.study import run_study

    monkeypatch.setitem(datasets.DATASET_SPECS, "train-toy", lambda: _records("train-toy", TRAIN))
    a, _b = two_lms
    settings = settings_for(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", lm_cache=False, lm_num_retries=0)
    text = (f'[study]\nname = "arms"\nthreads = 2\n\n[[program]]\nname = "cot"\narms = ["none", "bootstrap"]\n'
            f'train = "train-toy"\ntrain_limit = 3\n\n[[dataset]]\nspec = "compmix-toy"\nlimit = 3\n\n'
            f'[[lm]]\nname = "a"\nprovider = "openai_compatible"\nmodel = "model-a"\napi_base = "{a.api_base}"\n')
    study = _load(tmp_path, text)
    a.state.reset()
    done = run_study(settings, study, out=tmp_path / "study", progress=False)
    assert not done.failed and len(done.cells) == 2
    by_arm = {}
    for cell in done.cells:
        rows = [json.loads(x) for x in (cell.folder / "predictions.jsonl").read_text().splitlines()]
        assert len(rows) == 3 and not any(r["error"] for r in rows)
        by_arm[cell.cell.arm] = rows
    compiled = by_arm["bootstrap"]
    for row in compiled:  # demos bootstrapped from the train set, none of them an evaluation question
        (ids,) = row["demos"].values()
        assert ids and set(ids) <= {"train-toy:0", "train-toy:1", "train-toy:2"}
    assert not any(any(r["demos"].values()) for r in by_arm["none"] if r.get("demos"))
    assert all(r["prompt_tokens"] > u["prompt_tokens"] for r, u in zip(compiled, by_arm["none"]))

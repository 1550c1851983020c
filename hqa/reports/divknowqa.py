"""DIVKNOWQA's tables over hqa evaluation runs of ``detllm`` (``hqa report divknowqa RUN_DIR… [--closed-book DIR]``).

Each run folder is one ``hqa evaluate --program detllm --program-kwargs …`` run, its configuration read from its tag.
One line per arm for Tables 2/3 and 6 (EM, F1, Recall, H1-R, H2-R), named by DIVKNOWQA's arm names where the options
match one, with the paper's numbers beside them; Table 5's QID / QID+REL / QID* from each trace
(:func:`sparql_linking`; the datasets carry no gold relation ids, so the relation counts as right when the query over
the right entity returns the answer — hqa's reading of "entity IDs and relation IDs"); with ``--closed-book``, Table
4's overlap.  Each table and command: docs/reproduction.md.  Correct means :func:`hqa.scoring.stats.is_correct`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hqa.errors import DataError
from hqa.reports.markdown import fmt, table
from hqa.reports.retrieval import hop_retrieval
from hqa.schemas.run_folder import RunFolder
from hqa.schemas.trace import trace_of
from hqa.scoring.metrics import answer_recall
from hqa.scoring.stats import is_correct

__all__ = ["PAPER", "arm_name", "closed_book_overlap", "divknowqa_markdown", "divknowqa_tables", "sparql_linking"]

#: DIVKNOWQA's reported numbers (gpt-3.5-turbo on DIVKNOWQA): Tables 2, 3, 4, 6 as EM / F1 / Recall / H1-R / H2-R and
#: Table 5 as QID / QID+REL / QID* — reference values, not measured here.
PAPER: dict[str, dict[str, float | None]] = {
    "w/o SPARQL Text-KB(Sparse)": {"em": 27.9, "f1": 31.0, "recall": 31.2, "H1-R": 57.6, "H2-R": 41.2},
    "w/o SPARQL Text-KB(Dense)": {"em": 22.7, "f1": 26.1, "recall": 26.9, "H1-R": 54.9, "H2-R": 32.0},
    "w/o SPARQL Text(Sparse)-KB(Sparse)": {"em": 26.4, "f1": 29.8, "recall": 30.2, "H1-R": 60.0, "H2-R": 41.2},
    "w/o SPARQL Text(Dense)-KB(Sparse)": {"em": 30.7, "f1": 35.0, "recall": 35.5, "H1-R": 68.9, "H2-R": 46.8},
    "w/ SPARQL Text-KB(Sparse)": {"em": 28.8, "f1": 31.9, "recall": 32.9, "H1-R": 58.0, "H2-R": 42.9,
                                  "QID": 26.5, "QID+REL": 22.4, "QID*": 6.91},
    "w/ SPARQL Text-KB(Dense)": {"em": 31.2, "f1": 34.7, "recall": 35.9, "H1-R": 64.3, "H2-R": 42.6,
                                 "QID": 31.8, "QID+REL": 27.6, "QID*": 7.87},
    "w/ SPARQL Text(Sparse)-KB(Sparse)": {"em": 28.5, "f1": 31.8, "recall": 32.0, "H1-R": 61.5, "H2-R": 42.1,
                                          "QID": 26.3, "QID+REL": 22.6, "QID*": 7.34},
    "DETLLM": {"em": 32.1, "f1": 35.7, "recall": 35.6, "H1-R": 70.1, "H2-R": 47.1,
               "QID": 29.7, "QID+REL": 26.5, "QID*": 7.66},
    "Closed Book": {"em": 30.2, "f1": 33.8, "recall": 31.2, "H1-R": None, "H2-R": None},
    "Oracle_Text": {"em": 26.8, "f1": 31.3, "recall": 33.4, "H1-R": 96.4, "H2-R": 51.7},
    "Oracle_KB": {"em": 38.1, "f1": 40.0, "recall": 42.2, "H1-R": 100.0, "H2-R": 62.1},
    "Oracle_All": {"em": 48.7, "f1": 52.2, "recall": 52.8, "H1-R": 100.0, "H2-R": 96.7},
}
#: Table 4's overlap figures (§4.3, "Comparing with Closed-book LLM")
PAPER_OVERLAP = {"closed_book_share_of_detllm_correct": 50.8, "either_correct_share": 45.4}
DEFAULTS = {"sources": "separate", "text_retriever": "dense", "kb_retriever": "sparse", "sparql": True,
            "oracle": "off"}


def _pct(num: float, den: float) -> float | None:
    return round(100 * num / den, 1) if den else None


def _paper(v: float | None) -> str:
    """A paper's number as printed (``7.66`` stays ``7.66``)."""
    return "–" if v is None else f"{v:g}"


def arm_name(program: str, kwargs: dict[str, Any]) -> str:
    """DIVKNOWQA's name for a run's configuration (Tables 3, 4, 6), or the options themselves when none fits."""
    if program == "closedbook":
        return "Closed Book"
    opts = {**DEFAULTS, **{k: v for k, v in kwargs.items() if k in DEFAULTS}}
    if opts["oracle"] != "off":
        return "Oracle_All" if opts["oracle"] == "all" else f"Oracle_{opts['oracle']}"
    if opts["sources"] == "unified":
        body = f"Text-KB({'Dense' if opts['text_retriever'] == 'dense' else 'Sparse'})"
    elif opts["text_retriever"] in ("dense", "sparse"):
        kb = "Dense" if opts["kb_retriever"] == "dense" else "Sparse"
        body = f"Text({opts['text_retriever'].title()})-KB({kb})"
    else:
        body = f"Text(Both)-KB({opts['kb_retriever'].title()})"
    if opts["sparql"]:
        return "DETLLM" if body == "Text(Dense)-KB(Sparse)" else f"w/ SPARQL {body}"
    return f"w/o SPARQL {body}"


def _top_picks(linked: list[dict]) -> set[str]:
    """The first candidate of each mention (the one the program used)."""
    seen, out = set(), set()
    for c in linked:
        mention = c.get("mention")
        if mention not in seen:
            seen.add(mention)
            if c.get("id"):
                out.add(str(c["id"]))
    return out


_WD = re.compile(r"wd:(Q\d+)")


def sparql_linking(rows: list[dict]) -> dict[str, Any] | None:
    """Table 5 (percent) over rows with gold question entities; None when there are none.  *QID*: some hop's
    top-linked entity (first candidate of a mention) is a gold entity; *QID+REL*: QID, and a SPARQL query naming it
    kept rows holding a gold answer (label or id); *QID**: a gold entity was a candidate but not picked."""
    scored = [r for r in rows if r.get("gold_entities")]
    if not scored:
        return None
    qid = qid_rel = qid_star = 0
    for r in scored:
        gold = set(r["gold_entities"])
        hops = trace_of(r).hops or []
        picks = set().union(*(_top_picks(h.linked_entities) for h in hops)) if hops else set()
        candidates = {str(c.get("id")) for h in hops for c in h.linked_entities}
        hit = picks & gold
        if hit:
            qid += 1
            answers, ids = list(r.get("gold") or []), {str(g) for g in r.get("gold_ids") or []}
            for h in hops:
                if any(set(_WD.findall(str((e.get("meta") or {}).get("query", "")))) & hit
                       and (answer_recall(re.sub(r"[=|(),]", " ", str(e.get("text", ""))), answers) >= 1.0
                            or ids & set(re.findall(r"Q\d+", str(e.get("text", "")))))
                       for e in h.kept if e.get("source") == "sparql"):
                    qid_rel += 1
                    break
        elif candidates & gold:
            qid_star += 1
    n = len(scored)
    return {"n": n, "QID": _pct(qid, n), "QID+REL": _pct(qid_rel, n), "QID*": _pct(qid_star, n)}


def _arm(run_dir: Path) -> dict[str, Any]:
    run = RunFolder(run_dir).read_run()
    rows, program, kwargs = run.rows, run.program, run.program_kwargs
    hr = hop_retrieval(rows) or {}
    line = {"run": str(run_dir), "program": program, "program_kwargs": kwargs, "arm": arm_name(program, kwargs),
            "dataset": run.dataset, "n": len(rows)}
    for k in ("em", "f1", "recall"):
        line[k] = _pct(sum(float((r.get("scores") or {}).get(k, 0.0)) for r in rows), len(rows))
    for h in ("H1-R", "H2-R"):
        line[h] = None if h not in hr or hr[h]["value"] is None else round(100 * hr[h]["value"], 1)
    line["table5"] = sparql_linking(rows) if program == "detllm" else None
    return line


def closed_book_overlap(detllm_dir: Path, closed_dir: Path) -> dict[str, Any]:
    """Table 4's overlap over the questions both runs hold."""
    a = {r["id"]: r for r in RunFolder(detllm_dir).required_rows()}
    b = {r["id"]: r for r in RunFolder(closed_dir).required_rows()}
    common = [i for i in a if i in b]
    if not common:
        raise DataError(f"{detllm_dir} and {closed_dir} share no question ids")

    def ok(r: dict) -> bool:
        return is_correct(r.get("answer"), r.get("gold") or [], r.get("gold_ids") or [])

    da = {i for i in common if ok(a[i])}
    cb = {i for i in common if ok(b[i])}
    return {"n": len(common), "detllm_correct": len(da), "closed_book_correct": len(cb), "both": len(da & cb),
            "closed_book_share_of_detllm_correct": _pct(len(da & cb), len(da)),
            "either_correct_share": _pct(len(da | cb), len(common)), "paper": PAPER_OVERLAP}


def divknowqa_tables(runs: list[Path], closed_book: Path | None = None) -> dict[str, Any]:
    """Every arm's line (Tables 2/3/6, Table 5) and, with a closed-book run, Table 4."""
    arms = [_arm(Path(r)) for r in runs]
    out: dict[str, Any] = {"arms": arms}
    if closed_book is not None:
        detllm = [a for a in arms if a["arm"] == "DETLLM"] or [a for a in arms if a["program"] == "detllm"]
        if not detllm:
            raise DataError("--closed-book needs a detllm run among the runs")
        out["closed_book"] = _arm(Path(closed_book))
        out["table4"] = closed_book_overlap(Path(detllm[0]["run"]), Path(closed_book))
    return out


def divknowqa_markdown(result: dict[str, Any]) -> str:
    cols = ["em", "f1", "recall", "H1-R", "H2-R"]
    lines = ["## DIVKNOWQA Tables 2/3/6 (hqa runs; paper = DIVKNOWQA's gpt-3.5-turbo numbers on its own data)", ""]
    body = []
    for a in result["arms"] + ([result["closed_book"]] if "closed_book" in result else []):
        body.append([a["arm"], a["dataset"], a["n"], *[fmt(a[c], 1) for c in cols], a["run"]])
        ref = PAPER.get(a["arm"])
        if ref:
            body.append([f"  paper: {a['arm']}", "DIVKNOWQA", "", *[_paper(ref.get(c)) for c in cols], ""])
    lines += table(["arm", "dataset", "n", "EM", "F1", "Recall", "H1-R", "H2-R", "run"], body, digits=1)
    t5 = [a for a in result["arms"] if a.get("table5")]
    if t5:
        lines += ["", "## DIVKNOWQA Table 5: entity linking behind the SPARQL (% of rows with gold entities)", ""]
        body = []
        for a in t5:
            t = a["table5"]
            body.append([a["arm"], t["n"], fmt(t["QID"], 1), fmt(t["QID+REL"], 1), fmt(t["QID*"], 1)])
            ref = PAPER.get(a["arm"])
            if ref and "QID" in ref:
                body.append([f"  paper: {a['arm']}", "", *[_paper(ref[c]) for c in ("QID", "QID+REL", "QID*")]])
        lines += table(["arm", "n", "QID", "QID+REL", "QID*"], body, digits=1)
    if "table4" in result:
        t = result["table4"]
        lines += ["", "## DIVKNOWQA Table 4: DETLLM vs closed book", "",
                  f"- questions in both runs: {t['n']}; DETLLM correct {t['detllm_correct']}, closed book correct "
                  f"{t['closed_book_correct']}, both {t['both']}",
                  "- closed book also correct, among DETLLM's correct: "
                  f"{fmt(t['closed_book_share_of_detllm_correct'], 1)} % "
                  f"(paper: {PAPER_OVERLAP['closed_book_share_of_detllm_correct']} %)",
                  f"- either correct, among all questions: {fmt(t['either_correct_share'], 1)} % (paper: "
                  f"{PAPER_OVERLAP['either_correct_share']} %)"]
    return "\n".join(lines) + "\n"

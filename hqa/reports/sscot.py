"""SS-CoT's Tables 1-3 over hqa evaluation runs (``hqa report sscot RUN_DIR…``).

Each run folder is one ``hqa evaluate`` run of ``closedbook`` / ``cot`` (``{"demos": "sscot"}``: SS-CoT Table 5's
exemplars) or ``sscot`` (``{"sources": …}``), its configuration read from its tag.  One line per run, named as the
paper names the row, with EM and F1 (fractions, as the paper prints them) and, for Bamboogle, the paper's LLaMA2-70b
numbers beside them; 2Wiki and MuSiQue (Table 1's other columns) are not available here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hqa.reports.markdown import table
from hqa.schemas.run_folder import RunFolder

__all__ = ["PAPER_BAMBOOGLE", "arm_name", "sscot_markdown", "sscot_tables"]

#: SS-CoT Table 2 (Bamboogle, LLaMA2-70b: Self-Ask, Standard, Text + KG + Model, KG + Text + Model) and Table 3's
#: Bamboogle column (Model, Text + Model, KG + Model) as (EM, F1) — reference values, not measured here
PAPER_BAMBOOGLE: dict[str, tuple[float, float]] = {
    "Self-Ask": (0.49, 0.62), "Standard": (0.23, 0.34), "Model": (0.42, 0.55), "Text + Model": (0.57, 0.70),
    "KG + Model": (0.40, 0.55), "KG + Text + Model": (0.54, 0.69), "Text + KG + Model": (0.54, 0.67),
}
_SOURCE_NAMES = {"kg": "KG", "text": "Text", "model": "Model"}
_ORDER = ["Standard", "CoT", "Model", "Text + Model", "KG + Model", "KG + Text + Model", "Text + KG + Model"]


def arm_name(program: str, kwargs: dict[str, Any]) -> str:
    """The paper's row name for a run's configuration; hqa's own runs say what differs (e.g. zero-shot)."""
    if program in ("closedbook", "cot"):
        name = "Standard" if program == "closedbook" else "CoT"
        return name if kwargs.get("demos") == "sscot" else f"{name} (zero-shot)"
    if program == "sscot":
        sources = str(kwargs.get("sources") or "kg,text,model")
        return " + ".join(_SOURCE_NAMES.get(s.strip(), s.strip()) for s in sources.split(",") if s.strip())
    return program


def _line(run_dir: Path) -> dict[str, Any]:
    run = RunFolder(run_dir).read_run()
    rows, program, kwargs = run.rows, run.program, run.program_kwargs
    dataset = str(run.dataset or "")
    arm = arm_name(program, kwargs)
    paper = PAPER_BAMBOOGLE.get(arm) if dataset.split(":")[0] == "bamboogle" else None
    line = {"run": str(run_dir), "arm": arm, "program": program, "program_kwargs": kwargs, "dataset": dataset,
            "n": len(rows), "paper_em": paper[0] if paper else None, "paper_f1": paper[1] if paper else None}
    for k in ("em", "f1"):
        line[k] = round(sum(float((r.get("scores") or {}).get(k, 0.0)) for r in rows) / len(rows), 3)
    return line


def sscot_tables(runs: list[Path]) -> dict[str, Any]:
    """One line per run, in the paper's row order (unknown configurations last)."""
    lines = [_line(Path(r)) for r in runs]
    lines.sort(key=lambda x: (x["dataset"], _ORDER.index(x["arm"]) if x["arm"] in _ORDER else len(_ORDER)))
    return {"rows": lines}


def sscot_markdown(result: dict[str, Any]) -> str:
    out = ["## SS-CoT Tables 1-3 (hqa runs; paper = LLaMA2-70b, Bamboogle only)", ""]
    out += table(["dataset", "row", "n", "EM", "F1", "paper EM", "paper F1"],
                 [[r["dataset"], r["arm"], r["n"], f"{r['em']:.2f}", f"{r['f1']:.2f}",
                   None if r["paper_em"] is None else f"{r['paper_em']:.2f}",
                   None if r["paper_f1"] is None else f"{r['paper_f1']:.2f}"] for r in result["rows"]], digits=1)
    return "\n".join(out)

"""HumanIQ RQ8's statistics of a human library: tool calls and tokens (counted with tiktoken) per solution process,
next to the published 6.75 tool calls and 642 tokens (``hqa report library``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hqa.lm.prefix_cache import TOKENIZER, encoding
from hqa.reports.markdown import table
from hqa.scoring.stats import BENCHMARKS, mean

__all__ = ["HUMANIQ_LIBRARY_REFERENCE", "library_markdown", "library_stats"]

# HumanIQ RQ8 as published: the workshop-made solution processes average 6.75 tool calls and 642 tokens.
HUMANIQ_LIBRARY_REFERENCE = {"tool_calls": 6.75, "tokens": 642.0}
# TOKENIZER (hqa.lm.prefix_cache): cl100k_base, GPT-4's tokenizer (tiktoken); HumanIQ does not name the one it
# counted with


def library_stats(datasets: tuple[str, ...] | list[str] = BENCHMARKS, path: Path | None = None) -> dict[str, Any]:
    """HumanIQ RQ8's statistics of a human library (``hqa.data.human.load_human_library``, the shipped one or the
    folder ``path``): per process, tool calls (Action steps) and tokens counted with :data:`TOKENIZER` — of the
    whole process as the prompt shows it (question, every Thought / Action / Action Input / Observation, final
    answers, assistant response) and of the part the human wrote (the same without the Observations, the tools'
    output).  Per benchmark and over all processes, next to the published 6.75 tool calls and 642 tokens."""
    from hqa.data.human import format_trajectory, load_human_library

    enc = encoding()  # tiktoken cl100k_base, offline

    def written(d) -> str:
        parts = [f"Question: {d.question}"]
        for st in d.steps:
            parts += [f"Thought: {st.thought}"] + ([f"Action: {st.action}", f"Action Input: {st.action_input}"]
                                                   if st.action else [])
        return "\n".join(parts + closing(d))

    def closing(d) -> list[str]:
        return [f"Final Answer: Wikipedia_Answer: {d.wikipedia_answer}, Wikidata_Answer: {d.wikidata_answer}",
                f"Assistant Response: {d.response or ''}"]

    def whole(d) -> str:
        return "\n".join([f"Question: {d.question}", format_trajectory(d.steps), *closing(d)])

    per: dict[str, dict[str, Any]] = {}
    every: list[tuple[int, int, int]] = []
    for ds in datasets:
        demos = load_human_library([ds], path=path, strict=True)
        vals = [(len(d.actions), len(enc.encode(whole(d))), len(enc.encode(written(d)))) for d in demos]
        every += vals
        per[ds] = _library_row(vals)
    return {"tokenizer": TOKENIZER, "per_benchmark": per, "all": _library_row(every),
            "paper": HUMANIQ_LIBRARY_REFERENCE}


def _library_row(vals: list[tuple[int, int, int]]) -> dict[str, Any]:
    return {"processes": len(vals), "tool_calls": mean([float(v[0]) for v in vals]),
            "tokens_whole": mean([float(v[1]) for v in vals]), "tokens_written": mean([float(v[2]) for v in vals])}


def library_markdown(stats: dict[str, Any]) -> str:
    ref = stats["paper"]
    rows = [[b, v["processes"], v["tool_calls"], v["tokens_whole"], v["tokens_written"]]
            for b, v in [*stats["per_benchmark"].items(), ("all", stats["all"])]]
    rows.append(["HumanIQ RQ8 (paper)", None, ref["tool_calls"], ref["tokens"], None])
    return "\n".join([f"# Human solution processes (HumanIQ RQ8), tokens counted with {stats['tokenizer']}", "",
                      *table(["library", "processes", "tool calls", "tokens (whole process)",
                              "tokens (human-written, no observations)"], rows),
                      "The paper does not say which text its 642 tokens count nor with which tokenizer; both "
                      "readings are shown."])

"""What a run retrieved, linked and queried, and what it cost: retrieval per hop (DIVKNOWQA Table 2), entity
linking (DIVKNOWQA Table 5), SPARQL execution, SS-CoT's chains, and the cost per question next to HumanIQ's reported
5.0 tool calls and 575 generated tokens (the paper's GPT-4 numbers).  Each definition: docs/evaluation.md,
"Definitions".
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hqa.lm.prefix_cache import TOKENIZER, prefix_share
from hqa.reports.markdown import fmt, table
from hqa.schemas.trace import trace_of
from hqa.scoring.metrics import answer_recall
from hqa.scoring.stats import mean, ratio

__all__ = ["COST_KEYS", "HUMANIQ_REFERENCE", "cost_markdown", "cost_stats", "entity_linking", "evidence_text",
           "hop_retrieval", "prefix_cache_stats", "retrieval_markdown", "sparql_stats", "sscot_stats"]

# HumanIQ (GPT-4) per-question averages as reported in the paper — reference numbers, not measured here.
HUMANIQ_REFERENCE = {"tool_calls": 5.0, "completion_tokens": 575.0}
COST_KEYS = ("lm_calls", "prompt_tokens", "cached_prompt_tokens", "completion_tokens", "tool_calls", "seconds")


def evidence_text(items: Any) -> list[str]:
    return [str(e.get("text", "")) if isinstance(e, dict) else str(e) for e in items or [] if e is not None]


def hop_retrieval(rows: list[dict]) -> dict[str, Any] | None:
    """H1-R, H2-R, … over rows with a gold decomposition and a per-hop trace (``trace.hops[i].kept``)."""
    hits: dict[int, list[float]] = {}
    for r in rows:
        decomposition = r.get("decomposition") or []
        hops = trace_of(r).hops
        if not decomposition or hops is None:
            continue
        for i, gold in enumerate(decomposition):
            kept = evidence_text(hops[i].kept) if i < len(hops) else []
            golds = [a for a in (gold or {}).get("answers", []) or [] if str(a).strip()]
            ok = any(answer_recall(text, golds) >= 1.0 for text in kept) if golds else False
            hits.setdefault(i + 1, []).append(1.0 if ok else 0.0)
    if not hits:
        return None
    return {f"H{h}-R": {"n": len(v), "value": mean(v)} for h, v in sorted(hits.items())}


def entity_linking(rows: list[dict]) -> dict[str, Any] | None:
    """Share of rows with gold question entities where a linked QID is one of them; None when nothing was linked
    in the whole run (a program that does not link, e.g. closed-book)."""
    if not any(trace_of(r).linked_ids() for r in rows):
        return None
    scored = [r for r in rows if r.get("gold_entities")]
    if not scored:
        return None
    links = [trace_of(r).linked_ids() for r in scored]
    correct = sum(1 for r, ids in zip(scored, links) if ids & set(r["gold_entities"]))
    return {"n": len(scored), "with_links": sum(1 for ids in links if ids), "correct": correct,
            "accuracy": ratio(correct, len(scored))}


def sparql_stats(rows: list[dict]) -> dict[str, Any] | None:
    """Execution success and non-empty rates over every query the traces record (DIVKNOWQA Table 5)."""
    per_row = [trace_of(r).sparql for r in rows]
    queries = [q for qs in per_row for q in qs]
    if not queries:
        return None
    ok = [q for q in queries if q.ok]
    nonempty = [q for q in ok if q.non_empty]
    return {"issued": len(queries), "questions": sum(1 for qs in per_row if qs),
            "per_question": mean([float(len(qs)) for qs in per_row]),
            "succeeded": len(ok), "non_empty": len(nonempty),
            "success_rate": ratio(len(ok), len(queries)), "non_empty_rate": ratio(len(nonempty), len(queries)),
            "endpoint_unavailable": sum(1 for q in queries if q.unavailable)}


def sscot_stats(rows: list[dict]) -> dict[str, Any] | None:
    """Chain statistics of SS-CoT traces: sampled, valid, errors by type, masks filled by KG / text / LM."""
    traced = [t for t in (trace_of(r) for r in rows) if t.program == "sscot" or t.chains is not None]
    if not traced:
        return None
    chains = [c for t in traced for c in t.chains or []]
    errors = Counter(e for c in chains for e in c.get("errors") or [])
    fills = [f for t in traced for f in t.fills or []]
    via = Counter(f.get("via") for f in fills)
    return {"questions": len(traced), "chains_sampled": len(chains),
            "chains_valid": sum(1 for c in chains if not c.get("errors")),
            "valid_rate": ratio(sum(1 for c in chains if not c.get("errors")), len(chains)),
            "errors": dict(sorted(errors.items())), "lm_parse_failures": sum(1 for c in chains if c.get("lm_error")),
            "masks_filled": len(fills), "filled_by": {k: via.get(k, 0) for k in ("kg", "text", "lm")},
            "fallback_to_recall": sum(1 for t in traced if t.fallback)}


def cost_stats(rows: list[dict]) -> dict[str, float | None]:
    return {k: mean([float(r.get(k) or 0) for r in rows]) for k in COST_KEYS}


def prefix_cache_stats(rows: list[dict]) -> dict[str, dict[str, Any]]:
    """Per program, :func:`hqa.lm.prefix_cache.prefix_share` of its rows (in file order): the share of its prompt
    tokens a provider's prefix cache can serve with the program's step layout, under OpenAI's rule; programs whose
    rows recorded no prompts (runs from before hqa recorded them, imports) are left out."""
    by_program: dict[str, list[dict]] = {}
    for r in rows:
        by_program.setdefault(trace_of(r).program or "?", []).append(r)
    out = {p: prefix_share(rs) for p, rs in by_program.items()}
    return {p: v for p, v in out.items() if v is not None}


def _cost_table(c: dict[str, Any], ref: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    lines = table(["", "this run", "HumanIQ paper (GPT-4)"],
                  [["LM calls", c["lm_calls"], None], ["prompt tokens", c["prompt_tokens"], None],
                   ["cached prompt tokens (provider's prefix cache)", c.get("cached_prompt_tokens"), None],
                   ["completion tokens", c["completion_tokens"], ref["completion_tokens"]],
                   ["tool calls", c["tool_calls"], ref["tool_calls"]], ["seconds", c["seconds"], None]])
    lines += ["Token counts are what the LM reported; a reply served from the DSPy cache reports none"
              + (f" ({summary['rows_without_token_usage']} of {summary['n']} questions made LM calls without "
                 "token counts, so the token means are lower bounds)." if summary.get("rows_without_token_usage")
                 else "."), ""]
    pc = summary.get("prefix_cache") or {}
    if pc:
        lines += table(["program", "LM requests per question", f"prompt tokens per question ({TOKENIZER})",
                        "prefix cache can serve",
                        "repeated in the same question", "shared across questions", "measured cached share"],
                       [[p, round(v["lm_requests"] / v["questions"], 2), round(v["prompt_tokens"] / v["questions"]),
                         v["share"], v["share_within_question"],
                         v["share_across_questions"], v["measured_share"]] for p, v in pc.items()])
        lines += ["Share of prompt tokens a provider's prefix cache can serve with the program's step layout, from "
                  "the prompts each run recorded, under OpenAI's rule (a cached prefix is at least 1,024 tokens and "
                  "grows in 128-token steps; platform.openai.com/docs/guides/prompt-caching): a repeated prefix of "
                  "an earlier LM request of the same question (an agent resending its trajectory), or of any earlier "
                  "request (the shared instructions and demos). An upper bound: no eviction, questions in the order "
                  "their rows were written. Measured = the provider's cached / prompt tokens (– when it reported "
                  "none).", ""]
    return lines


def cost_markdown(summary: dict[str, Any]) -> list[str]:
    """The report's cost section: per question, this run's LM calls, tokens, tool calls and seconds next to
    HumanIQ's reported numbers, with the prefix-cache shares (an imported run records only its tool calls)."""
    c = summary["cost"]
    ref = summary.get("humaniq_reference_gpt4") or HUMANIQ_REFERENCE
    lines = ["## Cost per question", ""]
    if summary.get("import"):
        lines += ["The authors' files record no LM calls, tokens or times"
                  + (f"; the logs show {fmt(c['tool_calls'])} tool calls per question" if c["tool_calls"] else "")
                  + f" (HumanIQ reports {fmt(ref['tool_calls'])} for HQA-GPT-4).", ""]
    else:
        lines += _cost_table(c, ref, summary)
    return lines


def retrieval_markdown(summary: dict[str, Any]) -> list[str]:
    """The report's sections of hop retrieval, entity linking, SPARQL execution and SS-CoT chains (each only when
    the run has it)."""
    lines: list[str] = []
    if summary.get("hop_retrieval"):
        lines += ["## Retrieval per hop (DIVKNOWQA Table 2)", "",
                  "Hop i retrieved = a gold answer of gold sub-question i occurs in the evidence kept at hop i.", ""]
        lines += table(["hop", "questions", "retrieved"],
                       [[h, v["n"], v["value"]] for h, v in summary["hop_retrieval"].items()])
    el = summary.get("entity_linking")
    if el:
        lines += ["## Entity linking (DIVKNOWQA Table 5)", ""]
        lines += table(["questions with gold entities", "with a linked entity", "gold entity linked", "accuracy"],
                       [[el["n"], el["with_links"], el["correct"], el["accuracy"]]])
    sq = summary.get("sparql")
    if sq:
        lines += ["## SPARQL execution", ""]
        lines += table(["queries", "per question", "success rate", "non-empty rate", "endpoint unavailable"],
                       [[sq["issued"], sq["per_question"], sq["success_rate"], sq["non_empty_rate"],
                         sq["endpoint_unavailable"]]])
    ss = summary.get("sscot")
    if ss:
        errors = ", ".join(f"{k} {v}" for k, v in ss["errors"].items()) or "none"
        fb = ss["filled_by"]
        lines += ["## Semi-structured chains (SS-CoT)", ""]
        lines += table(["chains sampled", "valid", "valid rate", "masks filled", "by KG", "by text", "by LM",
                        "fallback to recall"],
                       [[ss["chains_sampled"], ss["chains_valid"], ss["valid_rate"], ss["masks_filled"], fb["kg"],
                         fb["text"], fb["lm"], ss["fallback_to_recall"]]])
        lines += [f"Errors by type: {errors}.", ""]
    return lines

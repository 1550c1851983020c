"""What ``hqa`` shows on a terminal: text made safe to print, argument text repaired, a question's trace, its steps
as they happen, and the estimate line printed before a run."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

# C0 and C1 controls, DEL, and the bidirectional marks/overrides/isolates that reorder what a terminal shows
_CONTROLS = "[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]"


def counted(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the noun in the number it takes: "1 triple", "2,044 triples", "1 labelled entity"."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def escape_controls(text: Any) -> str:
    """``text`` for a terminal: every control character written as its escape (``\\x1b``, ``\\n``,
    ``\\u202e``), so an answer or a passage cannot move the cursor, recolour the screen or forge output lines."""
    return re.sub(_CONTROLS, lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def repair_text(text: str) -> str:
    """Argument text with the bytes that were not UTF-8 (which Python hands over as lone surrogates) as U+FFFD."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # surrogates that did not come from undecodable bytes
        raw = text.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "replace")


def format_trace(trace: dict[str, Any], demos: dict[str, list[str]] | None = None) -> str:
    """``hqa ask``'s evidence trace: answers per source, linked entities, SPARQL queries and rows, tool calls, the
    evidence used, the demos each predictor held; every line escaped (:func:`escape_controls`)."""
    lines = [f"program: {trace.get('program')}"]
    answers = trace.get("answers", {})
    if answers.get("parametric") is not None:
        lines.append(f"parametric answer (LM memory): {answers['parametric']}")
    for key in ("text", "kg"):
        if answers.get(key):
            lines.append(f"{key} answer: {answers[key]}")
    if trace.get("entities"):
        lines.append("linked entities: " + ", ".join(f"{e['label']} ({e['id']})" for e in trace["entities"]))
    for q in trace.get("sparql", []):
        status = q.get("error") or f"{len(q.get('rows', []))} rows"
        lines.append(f"sparql [{status}]: " + " ".join(q.get("query", "").split())[:300])
        for row in q.get("rows", [])[:5]:
            lines.append("    " + json.dumps(row, ensure_ascii=False)[:200])
    for step in trace.get("tool_calls", []):
        lines.append(f"tool {step.get('tool')}({str(step.get('input'))[:80]}) -> {str(step.get('output'))[:120]}")
    if trace.get("evidence"):
        lines.append("evidence used (after rerank):")
        for ev in trace["evidence"]:
            meta = ev.get("meta", {})
            where = meta.get("title") or meta.get("id") or meta.get("s") or ""
            lines.append(f"  [{ev['source']}] {ev['text'][:160]}" + (f"  <- {where}" if where else ""))
    for name, ids in (demos or {}).items():
        lines.append(f"demos of {name}: " + ", ".join(ids))
    return "\n".join(escape_controls(line) for line in lines)


def step_printer(stream=None):
    """The ``emit`` of a :class:`hqa.serve.steps.StepRecorder` for ``hqa ask`` on a terminal: one line on stderr as
    each predictor call starts and as it ends (with its outputs or its error), escaped."""
    out = stream or sys.stderr

    def show(event: dict[str, Any]) -> None:
        name = event.get("predictor")
        if event.get("status") == "running":
            line = f"  … {name}"
        elif event.get("status") == "done":
            said = event.get("error") or "; ".join(f"{k}: {' '.join(str(v).split())[:80]}"
                                                   for k, v in (event.get("outputs") or {}).items())
            line = f"  {'✗' if event.get('error') else '✓'} {name}: {said}"
        else:
            return
        print(escape_controls(line), file=out, flush=True)

    return show


def estimate_printer(args: argparse.Namespace, settings, label: str):
    """The ``estimate`` callback of :func:`hqa.jobs.evaluate.evaluate`: one line on stderr (None with --no-estimate)."""
    if getattr(args, "no_estimate", False):
        return None
    from hqa.jobs.budget import estimate_line, price_for

    price = price_for(settings.lm)

    def show(prof, left: int, source: str, **extra) -> None:
        from tqdm import tqdm

        tqdm.write(estimate_line(label, prof, left, args.threads, source, price, **extra), file=sys.stderr)

    def starting(what: str) -> None:  # before a dry run: the estimate comes once it is measured
        from tqdm import tqdm

        tqdm.write(f"hqa: estimating {label}: {what}", file=sys.stderr)

    show.starting = starting
    return show

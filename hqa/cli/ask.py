"""``hqa ask QUESTION``: answer one question and show the evidence trace."""

from __future__ import annotations

import argparse
import json
import sys
import time

from hqa.cli import args as shared
from hqa.cli.output import escape_controls, format_trace, repair_text, step_printer
from hqa.errors import HQAError


#: how ``hqa ask`` names each source of :func:`hqa.schemas.trace.failed_sources`
SOURCE_NAMES = {"kg": "the KG", "text": "the text source", "linker": "the entity linker",
                "triples": "the triple search"}


def source_warnings(trace: dict, warned: set[str]) -> list[str]:
    """One line per source that could not answer the question (:func:`hqa.schemas.trace.failed_sources`), but not
    for those in ``warned`` (the KG, when the start-up check has said already that it is down)."""
    from hqa.schemas.trace import failed_sources

    return [f"{SOURCE_NAMES.get(source, source)} could not answer: {escape_controls(error)}"
            for source, error in failed_sources(trace).items() if source not in warned]


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("question", nargs="*", help="the question")
    shared.add_program_args(sp)
    sp.add_argument("--json", action="store_true", help="print answer and trace as JSON")


def run(args: argparse.Namespace) -> int:
    # argv bytes that are not UTF-8 arrive as lone surrogates: repair them to U+FFFD instead of failing later
    question = repair_text(" ".join(args.question)).strip()
    if not question:
        raise HQAError("empty question: pass the question as an argument, e.g. hqa ask \"Who directed Alien?\"")
    from hqa.errors import question_too_long  # the limit hqa serve applies to a question

    too_long = question_too_long(question)
    if too_long:
        raise HQAError(too_long)
    settings = shared.settings(args)
    from hqa.app import prefetch

    opened = shared.open_program(args, settings)
    shared.trace_questions(args, settings, opened)  # the question an MLflow trace (LM and tool calls as spans)
    program = opened.program
    warming = prefetch(opened)  # the toolbox loads while the first LM call runs
    from hqa.lm.calls import recording
    from hqa.serve.steps import StepRecorder

    # the demos each predictor's prompts held, the LM calls' counts, and on a terminal (or with -v) each step as it
    # happens on stderr: an agent's question takes tens of seconds with the embedded model
    shown = not args.json and (sys.stderr.isatty() or bool(getattr(args, "verbose", 0)))
    steps = StepRecorder(program, step_printer() if shown else None)
    start = time.monotonic()
    with recording(program, steps, steps.calls):
        pred = program(question=question)
    elapsed = time.monotonic() - start
    warming.join()
    trace = getattr(pred, "trace", None) or {}
    from hqa.answering.presentation import abstention_lines, candidate_lines, fallback_line, prediction_fields

    toolbox = getattr(opened, "toolbox", None)  # None: a program that reads no source
    for line in source_warnings(trace, toolbox.warned_sources if toolbox is not None else set()):
        shared.warn(line)

    fields = prediction_fields(pred, steps.calls.failures)
    if args.json:
        print(json.dumps({"question": question, **fields, "demos": steps.used, **steps.calls.counts(),
                          "seconds": round(elapsed, 3), "trace": trace}, ensure_ascii=False, indent=2, default=str))
    else:
        print(f"Q: {escape_controls(question)}")
        # each line escaped on its own: the line breaks are hqa's, the text in them is not
        fell_back = fallback_line(fields["fallback"])
        where = toolbox.evidence_from() if toolbox is not None else settings.world.path or "the knowledge pack"
        lines = abstention_lines(pred, where, steps.calls.failures) or [
            f"A: {fields['answer']}", *([f"hqa: {fell_back}"] if fell_back else []),
            *candidate_lines(fields["candidates"])]
        for line in lines:
            print(escape_controls(line))
        print()
        print(format_trace(trace, steps.used))
        print(f"({elapsed:.1f}s)")
    return 0  # the answer is out and nothing is left running: the process may end at once (registry: fast_exit)

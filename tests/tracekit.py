"""Every program run on one question under a prompt-independent scripted LM over the test knowledge pack: the rows
``tests/fixtures/trace_rows.jsonl`` holds (written by the code of main a353c41, before traces were typed) and the
runs tests/unit/schemas/test_trace.py compares with them.

Regenerate (only when a program's behaviour is meant to change; say so in the commit):
``python tests/tracekit.py ARTIFACTS_DIR`` with a pack built there (``hqa.world.pack.build_pack(ARTIFACTS_DIR/pack)``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import dspy
from conftest import KeepOrderReranker, fake_bm25, fake_dense  # noqa: E402
from lmkit import ScriptLM, stable  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))


FIXTURE = Path(__file__).resolve().parent / "fixtures" / "trace_rows.jsonl"
QUESTION = "What is the capital of Gabon?"
GOLD = ["Libreville"]

# (case name, program, kwargs, settings overrides, LM kind)
CASES = [
    ("simple", "simple", {}, {}, "script"),
    ("simple-grounded-abstain", "simple", {"abstain": "on"}, {"programs_answer_mode": "grounded"}, "script"),
    ("simple-memory-fallback", "simple", {"memory": "fallback"}, {}, "script"),
    ("closedbook", "closedbook", {}, {}, "script"),
    ("cot", "cot", {}, {}, "script"),
    ("hqa", "hqa", {"max_iters": 6}, {}, "script"),
    ("hqa-grounded", "hqa", {"max_iters": 6}, {"programs_answer_mode": "grounded"}, "script"),
    ("static", "static", {}, {}, "script"),
    ("latefusion", "latefusion", {"max_iters": 6}, {}, "script"),
    ("latefusion-random-grounded", "latefusion", {"max_iters": 6, "merge": "random"},
     {"programs_answer_mode": "grounded"}, "script"),
    ("detllm", "detllm", {"samples": 1}, {}, "script"),
    ("detllm-samples", "detllm", {"samples": 2}, {}, "script"),
    ("sscot", "sscot", {"n_samples": 1}, {}, "script"),
    ("sscot-text-model", "sscot", {"n_samples": 1, "sources": "text,model"}, {}, "script"),
    # every reply unparsable: the programs' error paths (safe_predict's records, DETLLM's and SS-CoT's own)
    ("closedbook-garbled", "closedbook", {}, {}, "garbled"),
    ("simple-garbled", "simple", {}, {}, "garbled"),
    ("hqa-garbled", "hqa", {"max_iters": 2}, {}, "garbled"),
    ("detllm-garbled", "detllm", {"samples": 1}, {}, "garbled"),
    ("sscot-garbled", "sscot", {"n_samples": 1}, {}, "garbled"),
]
TOOLBOX_PROGRAMS = {"simple", "hqa", "static", "latefusion", "detllm", "sscot"}


class FlowLM(ScriptLM):
    """:class:`test_live_programs.ScriptLM` (the agent's tool script, fields that must parse fixed), but every other
    field's value depends only on the field's name and how many calls came before, never on the prompt: a change
    of a prompt's wording (a demo, an instruction) leaves the run as it was."""

    def reply(self, messages):
        self.n_calls += 1
        text = super().reply(messages)
        return text.replace("d" + self.digest, f"d{self.n_calls:012d}")  # the call number, not the prompt's digest

    def reset(self) -> None:
        super().reset()
        self.n_calls = 0


class GarbledLM(dspy.utils.DummyLM):
    """Every reply is text no adapter can parse."""

    def __init__(self):
        super().__init__([{"nothing": "x"}] * 1000)


def run_case(case, settings_for) -> dict:
    """The predictions row (:func:`hqa.jobs.evaluate.run_one`) of one case, timings removed."""
    from hqa.jobs.evaluate import run_one
    from hqa.programs import build_program
    from hqa.toolbox import Toolbox

    name, program, kwargs, overrides, lm_kind = case
    overrides = {"programs_answer_mode": "free", **overrides}
    if program in TOOLBOX_PROGRAMS:
        kwargs = {**kwargs, "toolbox": Toolbox(settings_for(**overrides), dense=fake_dense, bm25=fake_bm25,
                                               reranker=KeepOrderReranker())}
    built = build_program(program, **kwargs)
    lm = FlowLM() if lm_kind == "script" else GarbledLM()
    if lm_kind == "script":
        lm.reset()
    example = dspy.Example(id=name, question=QUESTION, answers=GOLD, dataset="trace-fixture").with_inputs("question")
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        row = run_one(built, example)
    row = json.loads(json.dumps(row, default=str))
    for key in ("seconds", "prompt_tokens", "completion_tokens"):
        row[key] = 0
    return stable(row)


def main(artifacts: str) -> None:
    from hqa.config import load_settings

    def settings_for(**overrides):
        return load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=artifacts, **overrides)

    rows = [run_case(case, settings_for) for case in CASES]
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows),
                       encoding="utf-8")
    print(f"{len(rows)} rows -> {FIXTURE}")


if __name__ == "__main__":
    main(sys.argv[1])

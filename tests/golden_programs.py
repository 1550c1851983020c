"""Golden answers and traces of every program on a fixed question set under a scripted LM (issue 25: the wiring
refactor must not change behaviour).

``python tests/golden_programs.py`` builds a knowledge pack from the recorded sources (data directory) into a temp folder, runs each arm of
:data:`ARMS` (every program, and the shipped default program) on :data:`QUESTIONS` with :class:`ScriptLM` over the
pack's real KG and linker (dense passages and the reranker are the conftest stand-ins), and writes answers and traces
(timings left out) to :data:`GOLDEN`.  ``tests/unit/programs/test_golden_programs.py`` runs the same and compares.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import dspy  # noqa: E402
from conftest import KeepOrderReranker, fake_bm25, fake_dense  # noqa: E402
from lmkit import ScriptLM, stable  # noqa: E402

GOLDEN = HERE / "data" / "golden_programs.json"
QUESTIONS = ["What is the capital of Gabon?", "Who directed Alien?", "Who is the author of Animal Farm?"]
# (arm name, program name or "default" for the shipped compiled program, constructor kwargs, settings overrides)
ARMS = [
    ("simple", "simple", {}, {}),
    ("simple-free", "simple", {}, {"programs_answer_mode": "free"}),
    ("closedbook", "closedbook", {}, {}),
    ("cot", "cot", {}, {}),
    ("humaniq", "humaniq", {"max_iters": 6}, {}),
    ("humaniq-free", "humaniq", {"max_iters": 6}, {"programs_answer_mode": "free"}),
    ("static", "static", {}, {}),
    ("latefusion", "latefusion", {"max_iters": 6}, {}),
    ("detllm", "detllm", {"samples": 1}, {}),
    ("sscot", "sscot", {"n_samples": 1}, {}),
    ("default", "default", {}, {}),
]


def settings_at(artifacts: Path, **overrides):
    from hqa.config import load_settings

    return load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(artifacts), **overrides)


def open_arm(program: str, kwargs: dict, settings):
    """The program of one arm, given a toolbox with the stand-in dense retriever, BM25 and reranker."""
    from hqa.app import open_program
    from hqa.toolbox import Toolbox

    toolbox = Toolbox(settings, dense=fake_dense, bm25=fake_bm25, reranker=KeepOrderReranker())
    if program == "default":
        return open_program(settings, configure=False, toolbox=toolbox).program
    return open_program(settings, program, program_kwargs=kwargs, configure=False, toolbox=toolbox).program


def run_all(artifacts: Path) -> dict:
    out: dict = {}
    for arm, program, kwargs, overrides in ARMS:
        settings = settings_at(artifacts, **overrides)
        prog = open_arm(program, kwargs, settings)
        lm = ScriptLM()
        rows = []
        for question in QUESTIONS:
            lm.reset()
            with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
                pred = prog(question=question)
            trace = json.loads(json.dumps(getattr(pred, "trace", None) or {}, default=str, sort_keys=True))
            rows.append({"question": question, "answer": str(pred.answer), "trace": stable(trace),
                         "prompts": list(lm.prompts)})
        out[arm] = rows
    return out


def main() -> None:
    import tempfile

    from hqa.world.pack import build_pack

    with tempfile.TemporaryDirectory() as tmp:
        build_pack(Path(tmp) / "pack", leads=None)  # the pack the tests build (tests/conftest.py built_pack)
        result = run_all(Path(tmp))
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(result, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}: {sum(len(v) for v in result.values())} answers")


if __name__ == "__main__":
    main()

"""The ``hqa`` command's one lazy registry: names → ``"module"`` or ``"module:attr"`` strings, imported when used,
so ``hqa --help`` and ``hqa ask`` load neither DSPy nor the compile package (tests/integration/test_wiring.py).
"""

from __future__ import annotations

from typing import NamedTuple

from hqa.registry import resolve  # the one resolver of hqa's registries (hqa.cli.report reads it from here)


class Command(NamedTuple):
    """One ``hqa`` subcommand: the module with ``add_arguments(parser)`` and ``run(args) -> exit code``, its line in
    ``hqa --help``, and whether the process may end at once after it finished (``hqa ask``, issue 31)."""

    module: str
    help: str
    fast_exit: bool = False


COMMANDS: dict[str, Command] = {  # in the order ``hqa --help`` lists them
    "ask": Command("hqa.cli.ask", "answer one question and show the evidence trace", fast_exit=True),
    "config": Command("hqa.cli.config", "show or change settings"),
    "pack": Command("hqa.cli.pack", "build or inspect the offline knowledge pack"),
    "data": Command("hqa.cli.data", "the benchmarks and recordings hqa reads: list them, pull them from their origin "
                                    "(or a mirror) into the data directory"),
    "world": Command("hqa.cli.world", "build, list, show, use or remove worlds (KG + labels + passages at scale)"),
    "compile": Command("hqa.cli.compile", "compile a program with an optimizer, evaluate, save, track in MLflow"),
    "train": Command("hqa.cli.train", "train the learned answer ranker (ranker) or fine-tune the cross-encoder "
                                      "reranker (reranker) on CompMix's training questions"),
    "compare": Command("hqa.cli.compare", "human vs automatic few-shots on one dev set: table, CSV, plot"),
    "evaluate": Command("hqa.cli.evaluate", "evaluate a program or compiled artifact on a dataset (resumable)"),
    "study": Command("hqa.cli.study", "a study file's programs × arms × datasets × LMs × seeds as one job "
                                      "(--dry-run: every cell's command and estimate)"),
    "results": Command("hqa.cli.results", "one table over run folders or a study: metric with 95% CI, cost, the "
                                          "papers' numbers, paired tests against a baseline, the reproduce command"),
    "report": Command("hqa.cli.report", "reports on evaluation runs: show one, compare two (paired), statistics of the "
                                        "human library (HumanIQ RQ8), import the HumanIQ authors' GPT-4 outputs, "
                                        "DIVKNOWQA's tables over detllm runs, SS-CoT's Tables 1-3, HumanIQ Table 8 "
                                        "(thoughts)"),
    "batch": Command("hqa.cli.batch", "answer a .jsonl/.csv of questions into a resumable JSONL with traces"),
    "serve": Command("hqa.cli.serve", "HTTP API and web page over one program (FastAPI + uvicorn)"),
    "registry": Command("hqa.cli.model_registry", "the MLflow model registry: point an alias at a version"),
    "cache": Command("hqa.cli.cache", "the live-source HTTP cache: stats, export to / import from JSONL"),
    "runs": Command("hqa.cli.runs", "list MLflow runs and compiled programs"),
}

# ``hqa report KIND``: each kind's handler (it checks its own arguments, then prints); the order is the choices'
REPORT_KINDS: dict[str, str] = {
    "show": "hqa.cli.report:show",  # one run's report, or several runs pooled
    "compare": "hqa.cli.report:compare",  # two runs, paired
    "library": "hqa.cli.report:library",  # HumanIQ RQ8: tool calls and tokens per human solution process
    "import": "hqa.cli.report:import_authors",  # the HumanIQ authors' GPT-4 outputs as a run folder
    "divknowqa": "hqa.cli.report:divknowqa",  # DIVKNOWQA Tables 2-6 over detllm arms
    "sscot": "hqa.cli.report:sscot",  # SS-CoT Tables 1-3 over closedbook / cot / sscot runs
    "thoughts": "hqa.cli.report:thoughts",  # HumanIQ Table 8: generated vs human-written thoughts (JSD)
}

OPTIMIZERS = "hqa.optimize.compile:OPTIMIZERS"  # read when --optimizer is checked or listed, never to build the parser


def command(name: str):
    """The module of ``hqa NAME``."""
    return resolve(COMMANDS[name].module)


class LazyChoices:
    """argparse ``choices`` read from a ``"module:attr"`` only when argparse checks or lists them."""

    def __init__(self, ref: str):
        self.ref = ref

    def names(self) -> list[str]:
        return list(resolve(self.ref))

    def __contains__(self, name) -> bool:
        return name in self.names()

    def __iter__(self):
        return iter(self.names())

"""HumanIQ (the program formerly named ``hqa``): a ReAct-style agent over six tools, then HumanIQ's final response
generation.

Per question: ``react`` (the step predictor; human solution processes become its demos, chosen per question by the
DPP — without a compile by :func:`hqa.artifacts.dpp_program.human_processes`, which :func:`hqa.app.open_program`
wraps around the program with the benchmark's library (``demos``, ``shots``, ``human_library``), and likewise in a
program compiled with :class:`hqa.optimize.compile.DPPFewShot`) picks Thought / tool / input until ``Finish`` or
``max_iters`` (15, the authors' LangChain default);
``extract`` reads the trajectory for the Wikipedia and Wikidata answers and the assistant response (unless Finish
already stated them); a tool call identical to an earlier one is answered "already done, see step N" without
running it, and the ``max_repeats``-th such call ends the loop; ``sources`` (:class:`SourceMerge`) answers from
memory and merges (HumanIQ §3, final response generation).

Demonstrations (HumanIQ §2: "each few-shot example contains the entire solution process"): with ``demo_form="full"``
(the default) every step's prompt holds the k selected human processes complete (:func:`human_react_demo`) before
the question and the trajectory so far, so all but the trajectory's growing tail is one prefix a prompt cache can
serve; ``demo_form="stepwise"`` (:func:`step_demo`) is an ablation kept from earlier hqa versions, compared in
docs/humaniq.md.
"""

from __future__ import annotations

import re
from typing import Literal, Optional

import dspy
from pydantic import Field

from hqa.data.traces import parse_final_answer
from hqa.scoring.answers import answer_or_none
from hqa.programs.arguments import ANSWER_MODE, RANKER_MODES, Arguments, arg
from hqa.programs.base import DEMO_SELECTIONS, Program
from hqa.data.human import HumanDemoSpec
from hqa.lm.calls import safe_predict
from hqa.answering.merge import SourceMerge
from hqa.programs.humaniq_tools import ALL_TOOLS, TEXT_TOOLS, AgentTools, tool_specs
from hqa.signatures.humaniq import ExtractAnswers, ReadPage, RelevantPage, agent_step
from hqa.squall.generate import SparqlWriter
from hqa.schemas.trace import SparqlCall, Trace, new_trace

#: how the step prompt shows the human processes: ``full`` (HumanIQ §2, the default) or ``stepwise`` (ablation)
DEMO_FORMS = ("full", "stepwise")
#: the agent's iteration budget: the authors' agent ran LangChain's ``AgentExecutor`` with its default
#: ``max_iterations`` (15; NIMI-research/Hybrid-QA builds the executor without setting it); the paper states none
MAX_ITERS = 15
HUMAN_LIBRARIES = ("compmix", "mintaka", "qald")


def format_step(thought: str, tool: str, args: str, observation: str) -> str:
    """One step in the trajectory format of the human traces (see hqa.data.human.format_trajectory)."""
    return f"Thought: {thought}\nAction: {tool}\nAction Input: {args}\nObservation: {observation}"


class HumanProcessArguments(Arguments):
    """The arguments every HumanIQ program shares: its answer-time demo selection
    (:meth:`~hqa.programs.base.Program.init_human_processes`) and the merge's answer mode and choices."""

    answer_mode: ANSWER_MODE = arg(None, setting="answer_mode")
    choices: Optional[int] = arg(None, low=1, high=20, setting="choices")
    # grounded mode: how each source's candidates are ranked; "hand" (the default, as the papers' programs ran before
    # issue 57) or "learned", the learned answer ranker (hqa.answering.ranker), an ablation; fixed when the program is
    # built (--program-kwargs), as the merge holds it
    ranker: Literal[RANKER_MODES] = arg("hand")  # type: ignore[valid-type]
    demos: Literal[DEMO_SELECTIONS] = arg("dpp")  # type: ignore[valid-type]
    shots: int = arg(3, low=0, high=20)
    human_library: Optional[Literal[HUMAN_LIBRARIES]] = arg(None, runtime=True)  # type: ignore[valid-type]


class HumanIQArguments(HumanProcessArguments):
    """:class:`HumanIQAgent`'s arguments (see the module docstring)."""

    max_iters: int = arg(MAX_ITERS, high=20, runtime=True)
    k: int = arg(3, high=20, runtime=True)
    tools: tuple[str, ...] = Field(ALL_TOOLS, strict=False)
    merge: bool = arg(True)
    max_repeats: int = arg(2, high=10, runtime=True)
    sparql_generator: str = arg("squall")
    squall_k: int = arg(2)
    demo_form: Literal[DEMO_FORMS] = arg("full")  # type: ignore[valid-type]


class HumanIQAgent(SparqlWriter, Program):
    """The HumanIQ agent.  ``tools`` restricts the tool set (the late-fusion baseline uses text-only / KG-only)."""

    needs_toolbox = writes_sparql = per_question_demos = humaniq_processes = True
    Arguments = HumanIQArguments

    def __init__(self, max_iters: int = MAX_ITERS, k: int = 3, tools: tuple[str, ...] = ALL_TOOLS, merge: bool = True,
                 toolbox=None, max_repeats: int = 2, sparql_generator: str = "squall", squall_k: int = 2,
                 demo_form: str = "full", answer_mode: str | None = None, choices: int | None = None,
                 demos: str = "dpp", shots: int = 3, human_library: str | None = None, ranker: str = "hand"):
        super().__init__()
        args = self.take_arguments(locals())
        self.demo_form = demo_form
        self.init_human_processes(demos, shots, human_library)
        self.max_iters = max_iters
        self.max_repeats = max_repeats
        self.k = k
        self.tools = tuple(tools)
        self.use_merge = merge
        self.toolbox = toolbox
        self.react = dspy.Predict(agent_step(tool_specs(self.tools)))  # tool names and instructions from the tools
        self.init_sparql_writer(sparql_generator, squall_k)  # GenerateSparql: HumanIQ §3 (SQUALL) or direct
        self.relevant_page = dspy.Predict(RelevantPage)  # WikiSearch's LM (HumanIQ: GPT-4 keeps the relevant page)
        self.read = dspy.Predict(ReadPage)  # Read's LM reader (HumanIQ §3: read())
        self.extract = dspy.Predict(ExtractAnswers)
        self.sources = SourceMerge(args["choices"], args["answer_mode"], ranker)

    def _relevant_page(self, question: str, pages: list[str]) -> tuple[str, str]:
        out = self.relevant_page(question=question, pages=pages)
        return str(out.title or ""), str(out.summary or "")

    def _read(self, question: str, title: str, document: str) -> str:
        return str(self.read(question=question, title=title, document=document).answer or "")

    def human_demo_builders(self) -> dict[str, HumanDemoSpec]:
        """Human solution processes for the step predictor (restricted to this agent's half when its tools are),
        human merge examples for the merge."""
        variant = ("wikipedia" if "RunSparql" not in self.tools else
                   "wikidata" if "WikiSearch" not in self.tools else "full")
        return {"react": HumanDemoSpec(variant, human_react_demo), "sources.merge": HumanDemoSpec("merge")}

    def step_demos(self, i: int) -> list:
        """The demos of the step prompt at agent step ``i``: the stored (complete) processes, or with
        ``demo_form="stepwise"`` each cut at step ``i`` (:func:`step_demo`)."""
        if self.demo_form == "stepwise":
            return [step_demo(d, i) for d in self.react.demos]
        return list(self.react.demos)

    def run_tools(self, question: str, trace: Trace,
                  evidence: dict[str, list] | None = None) -> tuple[str, dict[str, str | None]]:
        """The ReAct loop; returns the trajectory text and the per-source answers found, with the workflow's
        assistant response under ``"response"``.  ``evidence`` (a dict) receives what the allowed tools returned,
        per source."""
        tools = AgentTools(self.toolbox_or_fail(), question, self._generate_sparql, k=self.k, allowed=self.tools,
                           relevant_page=self._relevant_page, read=self._read)
        steps: list[str] = []
        finish_args = None
        for i in range(self.max_iters):
            step, error = safe_predict(self.react, question=question, trajectory="\n\n".join(steps),
                                       demos=self.step_demos(i))
            trace.note(error)
            if step is None:  # an unparsable step ends the loop; what was gathered so far is still used
                break
            tool = str(step.next_tool_name or "").strip()
            args = str(step.next_tool_args or "")
            trace.steps.append({"step": i, "thought": step.next_thought, "tool": tool, "input": args})
            if tool == "Finish":
                finish_args = args
                break
            observation = tools(tool, args)
            trace.steps[-1]["observation"] = observation[:500]
            steps.append(format_step(step.next_thought, tool, args, observation))
            if tools.repeats and len(tools.repeats) >= self.max_repeats:
                trace.stopped = f"{len(tools.repeats)} repeated tool calls"
                break
        trace.tool_calls = list(tools.calls)
        trace.repeated_tool_calls = tools.repeats
        trace.sparql = [SparqlCall.from_dict(q) for q in tools.sparql_log]
        trace.finished = finish_args is not None
        trajectory = "\n\n".join(steps)
        wiki = wd = response = None
        if finish_args and re.search(r"Wiki(pedia|data)_Answer", finish_args):
            stated, response = split_response(finish_args)
            parts = parse_final_answer(stated)
            wiki, wd = parts["wikipedia"], parts["wikidata"]
        elif steps:
            ex, error = safe_predict(self.extract, question=question, trajectory=trajectory)
            trace.note(error)
            if ex is not None:
                wiki, wd = ex.wikipedia_answer, ex.wikidata_answer
                response = str(ex.assistant_response or "").strip() or None
        # a source the agent's tools cannot reach has no answer
        answers = {"text": answer_or_none(wiki, clean=True) if "WikiSearch" in self.tools else None,
                   "kg": answer_or_none(wd, clean=True) if "RunSparql" in self.tools else None, "response": response}
        if evidence is not None:
            allowed = {"text": bool(set(TEXT_TOOLS) & set(self.tools)), "kg": "RunSparql" in self.tools}
            evidence.update({src: items for src, items in tools.evidence.items() if items and allowed[src]})
        return trajectory, answers

    def forward(self, question: str) -> dspy.Prediction:
        trace = new_trace("humaniq", question)
        evidence: dict[str, list] = {}
        _, answers = self.run_tools(question, trace, evidence)
        tb = self.toolbox_or_fail()
        trace.assistant_response = answers["response"]
        merged = self.sources(question, answers["text"], answers["kg"], use_merge=self.use_merge,
                              evidence=evidence, toolbox=tb, context=workflow_response(answers))
        trace.add(merged.trace)
        # text and kg: as the merge used them (grounded or written)
        trace.answers.text, trace.answers.kg, trace.answers.parametric = merged.text, merged.kg, merged.parametric
        trace.answers.final = merged.answer
        return dspy.Prediction(answer=merged.answer, trace=trace.to_dict())


_RESPONSE_RE = re.compile(r"\s*Assistan(?:t|ce) Response\s*:\s*", re.I)


def split_response(finish_args: str) -> tuple[str, str | None]:
    """``Wikipedia_Answer: a, Wikidata_Answer: [b] Assistant Response: text`` -> (the answers part, the text)."""
    m = _RESPONSE_RE.search(finish_args)
    if m is None:
        return finish_args, None
    return finish_args[:m.start()].rstrip(" ,"), finish_args[m.end():].strip() or None


def workflow_response(answers: dict[str, str | None]) -> str:
    """The HumanIQ workflow response the final step reads (HumanIQ §3): the assistant response (the evidence
    obtained and the thoughts), else — when the agent wrote none — the per-source answers it found."""
    if answers.get("response"):
        return str(answers["response"])
    parts = [f"{name}: {answers[key]}" for key, name in (("text", "Wikipedia"), ("kg", "Wikidata")) if answers.get(key)]
    return "; ".join(parts)


def human_react_demo(demo) -> dspy.Example:
    """A complete human solution process as one demo of ``react`` (HumanIQ §2: the few-shot example is the entire
    solution process): the question, every step in the trajectory, and as output the ``Finish`` step with the
    human's per-source answers and assistant response (the final answer format of the authors' prompt).

    The steps themselves are kept under ``steps`` for the ``stepwise`` ablation (:func:`step_demo`)."""
    from dataclasses import asdict

    from hqa.data.human import format_trajectory

    wiki = demo.wikipedia_answer or "None"
    wd = demo.wikidata_answer or "None"
    steps = [s for s in demo.steps if s.action]
    last = max((i for i, s in enumerate(demo.steps) if s.action), default=-1)
    closing = " ".join(s.thought.strip() for s in demo.steps[last + 1:] if s.thought and s.thought.strip())
    response = f"\n\nAssistant Response: {' '.join(demo.response.split())}" if demo.response else ""
    return dspy.Example(
        question=demo.question,
        trajectory=format_trajectory(demo.steps[:last + 1]),  # every step, a thought without an action too
        next_thought=closing or "I now know the final answer.",  # the human's closing thought when it wrote one
        next_tool_name="Finish",
        next_tool_args=f"Wikipedia_Answer: {wiki}, Wikidata_Answer: [{wd.strip('[]')}]{response}",
        steps=[asdict(s) for s in steps],
        source=demo.source,
        demo_id=demo.id,
    ).with_inputs("question", "trajectory")


def step_demo(example, i: int):
    """``demo_form="stepwise"`` (an ablation, not HumanIQ's prompt): the demo a human process gives at agent step
    ``i`` (0 = the first call): its first ``i`` steps as the
    trajectory and its step ``i + 1`` as the output; past its last step, the whole process and its ``Finish``.
    Demos without recorded ``steps`` (bootstrapped ones) are shown as they are."""
    steps = example.get("steps") if hasattr(example, "get") else None
    if not steps or i >= len(steps):
        return example
    from hqa.data.human import format_trajectory
    from hqa.data.traces import Step

    done = [Step(**s) for s in steps[:i]]
    nxt = Step(**steps[i])
    return dspy.Example(question=example["question"], trajectory=format_trajectory(done), next_thought=nxt.thought,
                        next_tool_name=nxt.action, next_tool_args=nxt.action_input,
                        source=example.get("source"), demo_id=example.get("demo_id")).with_inputs("question",
                                                                                                  "trajectory")
"""HQA / HumanIQ: a ReAct-style agent over six tools, then a merge of text, KG and parametric answers.

Per question: ``react`` (the step predictor; human solution processes become its demos, chosen per question by
:class:`hqa.optimize.dpp_fewshot.DPPFewShot`) picks Thought / tool / input until ``Finish`` or ``max_iters``;
``extract`` reads the trajectory for the Wikipedia and Wikidata answers (unless Finish already stated them);
a tool call identical to an earlier one is answered "already done, see step N" without running it, and the
``max_repeats``-th such call ends the loop;
``parametric`` answers from memory; ``merge`` combines the three (HumanIQ's final response generation).
"""

from __future__ import annotations

import re

import dspy

from hqa.data.traces import parse_final_answer
from hqa.programs.common import HumanDemoSpec, new_trace, none_if_empty, safe_predict
from hqa.programs.grounded import SourceMerge
from hqa.programs.tools import ALL_TOOLS, TEXT_TOOLS, AgentTools, tool_specs
from hqa.retrievers.registry import get_toolbox
from hqa.signatures.hqa_agent import ExtractAnswers, GenerateSparql, ReadPage, RelevantPage, agent_step

def format_step(thought: str, tool: str, args: str, observation: str) -> str:
    """One step in the trajectory format of the human traces (see hqa.data.human.format_trajectory)."""
    return f"Thought: {thought}\nAction: {tool}\nAction Input: {args}\nObservation: {observation}"


class HQAAgent(dspy.Module):
    """The HumanIQ agent.  ``tools`` restricts the tool set (the late-fusion baseline uses text-only / KG-only)."""

    #: per-call options (``hqa serve``'s ``options``): read at forward time, so a copy with other values is safe
    runtime_options = {"max_iters": (int, 1, 20), "k": (int, 1, 20), "max_repeats": (int, 1, 10)}

    def __init__(self, max_iters: int = 8, k: int = 3, tools: tuple[str, ...] = ALL_TOOLS, merge: bool = True,
                 toolbox: str = "default", max_repeats: int = 2):
        super().__init__()
        self.max_iters = max_iters
        self.max_repeats = max_repeats
        self.k = k
        self.tools = tuple(tools)
        self.use_merge = merge
        self.toolbox = toolbox
        self.react = dspy.Predict(agent_step(tool_specs(self.tools)))  # tool names and instructions from the tools
        self.gen_sparql = dspy.Predict(GenerateSparql)
        self.relevant_page = dspy.Predict(RelevantPage)  # WikiSearch's LM (HumanIQ: GPT-4 keeps the relevant page)
        self.read = dspy.Predict(ReadPage)  # Read's LM reader (HumanIQ §3: read())
        self.extract = dspy.Predict(ExtractAnswers)
        self.sources = SourceMerge()

    def _generate_sparql(self, question: str, entities: list[str], relations: list[str]) -> str:
        out = self.gen_sparql(question=question, entities=entities, relations=relations).sparql
        return re.sub(r"^```(?:sparql)?|```$", "", str(out or "").strip()).strip()

    def _relevant_page(self, question: str, pages: list[str]) -> tuple[str, str]:
        out = self.relevant_page(question=question, pages=pages)
        return str(out.title or ""), str(out.summary or "")

    def _read(self, question: str, title: str, document: str) -> str:
        return str(self.read(question=question, title=title, document=document).answer or "")

    def human_demo_builders(self) -> dict[str, HumanDemoSpec]:
        """Human solution processes for the step predictor (restricted to this agent's half when its tools are),
        human merge examples for the merge."""
        variant = ("wikipedia" if "GetWikidataID" not in self.tools else
                   "wikidata" if "WikiSearch" not in self.tools else "full")
        return {"react": HumanDemoSpec(variant, human_react_demo), "sources.merge": HumanDemoSpec("merge")}

    def run_tools(self, question: str, trace: dict,
                  evidence: dict[str, list] | None = None) -> tuple[str, dict[str, str | None]]:
        """The ReAct loop; returns the trajectory text and the per-source answers found.  ``evidence`` (a dict)
        receives what the allowed tools returned, per source."""
        tools = AgentTools(get_toolbox(self.toolbox), question, self._generate_sparql, k=self.k, allowed=self.tools,
                           relevant_page=self._relevant_page, read=self._read)
        steps: list[str] = []
        finish_args = None
        for i in range(self.max_iters):
            demos = [step_demo(d, i) for d in self.react.demos]  # human processes shown up to this step
            step = safe_predict(self.react, trace, question=question, trajectory="\n\n".join(steps), demos=demos)
            if step is None:  # an unparsable step ends the loop; what was gathered so far is still used
                break
            tool = str(step.next_tool_name or "").strip()
            args = str(step.next_tool_args or "")
            trace["steps"].append({"step": i, "thought": step.next_thought, "tool": tool, "input": args})
            if tool == "Finish":
                finish_args = args
                break
            observation = tools(tool, args)
            trace["steps"][-1]["observation"] = observation[:500]
            steps.append(format_step(step.next_thought, tool, args, observation))
            if tools.repeats and len(tools.repeats) >= self.max_repeats:
                trace["stopped"] = f"{len(tools.repeats)} repeated tool calls"
                break
        trace["tool_calls"] = [c.to_dict() for c in tools.calls]
        trace["repeated_tool_calls"] = tools.repeats
        trace["sparql"] = tools.sparql_log
        trace["finished"] = finish_args is not None
        trajectory = "\n\n".join(steps)
        answers: dict[str, str | None] = {"text": None, "kg": None}
        if finish_args and re.search(r"Wiki(pedia|data)_Answer", finish_args):
            parts = parse_final_answer(finish_args)
            answers = {"text": none_if_empty(parts["wikipedia"]), "kg": none_if_empty(parts["wikidata"])}
        elif steps:
            ex = safe_predict(self.extract, trace, question=question, trajectory=trajectory)
            if ex is not None:
                answers = {"text": none_if_empty(ex.wikipedia_answer), "kg": none_if_empty(ex.wikidata_answer)}
        if "GetWikidataID" not in self.tools:
            answers["kg"] = None
        if "WikiSearch" not in self.tools:
            answers["text"] = None
        if evidence is not None:
            allowed = {"text": bool(set(TEXT_TOOLS) & set(self.tools)), "kg": "RunSparql" in self.tools}
            evidence.update({src: items for src, items in tools.evidence.items() if items and allowed[src]})
        return trajectory, answers

    def forward(self, question: str) -> dspy.Prediction:
        trace = new_trace("hqa", question)
        evidence: dict[str, list] = {}
        _, answers = self.run_tools(question, trace, evidence)
        trace["answers"]["text"], trace["answers"]["kg"] = answers["text"], answers["kg"]
        tb = get_toolbox(self.toolbox)
        final = self.sources(question, answers["text"], answers["kg"], trace, tb.settings,
                             use_merge=self.use_merge, evidence=evidence, toolbox=tb)
        trace["answers"]["final"] = final  # text and kg: as the merge used them (grounded or written)
        return dspy.Prediction(answer=final, trace=trace)


def human_react_demo(demo) -> dspy.Example:
    """A complete human solution process as one demo of ``react``.

    Stored whole — every step in the trajectory, the ``Finish`` step with the human's per-source answers as output —
    and with the steps themselves under ``steps``, so that at agent step ``i`` the agent is shown, per selected
    human, the human's first ``i`` steps and its step ``i + 1`` (:func:`step_demo`): every step of the process is
    demonstrated at the point the agent is at, and so is when to stop."""
    from dataclasses import asdict

    from hqa.data.human import format_trajectory

    wiki = demo.wikipedia_answer or "None"
    wd = demo.wikidata_answer or "None"
    steps = [s for s in demo.steps if s.action]
    return dspy.Example(
        question=demo.question,
        trajectory=format_trajectory(steps),
        next_thought="I now know the final answer.",
        next_tool_name="Finish",
        next_tool_args=f"Wikipedia_Answer: {wiki}, Wikidata_Answer: [{wd.strip('[]')}]",
        steps=[asdict(s) for s in steps],
        source=demo.source,
        demo_id=demo.id,
    ).with_inputs("question", "trajectory")


def step_demo(example, i: int):
    """The demo a human process gives at agent step ``i`` (0 = the first call): its first ``i`` steps as the
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
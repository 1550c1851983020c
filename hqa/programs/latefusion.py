"""HumanIQ's late-fusion baseline (HumanIQ RQ4, Figure 5): two separate pipelines, merged afterwards.

The structured pipeline may use only generateQuery / runQuery / getLabel (:data:`STRUCTURED_TOOLS`; entity linking
happens inside GenerateSparql, which spots the question's entities when its input names no QIDs — there is no
GetWikidataID); the unstructured pipeline only search / read (:data:`UNSTRUCTURED_TOOLS`; ``search_summary=True`` adds
WikiSearchSummary, an option).  Each pipeline's iteration budget is the agent's (15).  Each is an
:class:`~hqa.programs.humaniq.HumanIQAgent` restricted to its tools, with its own human library (the late-fusion halves
``hqa/data/humaniq/late_fusion/{benchmark}_{wikipedia,wikidata}.json``; selected per question like the agent's).

``merge="random"``: if one pipeline answered, its answer; if both, one of the two at random (seeded per question) —
the paper's first response generation.  ``merge="lm"``: the final response generation of the agent
(:class:`~hqa.answering.merge.SourceMerge`) over both pipelines' answers and responses and the parametric answer.
"""

from __future__ import annotations

import random
import zlib
from typing import Literal

import dspy

from hqa.programs.base import Program
from hqa.data.human import HumanDemoSpec
from hqa.programs.arguments import arg
from hqa.programs.humaniq import DEMO_FORMS, MAX_ITERS, HumanIQAgent, HumanProcessArguments
from hqa.answering.merge import SourceMerge
from hqa.schemas.trace import new_trace

#: HumanIQ RQ4: the structured pipeline's tools (generateQuery, runQuery, getLabel)
STRUCTURED_TOOLS = ("GenerateSparql", "RunSparql", "GetLabel")
#: HumanIQ RQ4: the unstructured pipeline's tools (search, read)
UNSTRUCTURED_TOOLS = ("WikiSearch", "Read")
#: ``search_summary=True`` (an option, not RQ4's tool set) adds WikiSearchSummary, the authors' second search tool,
#: which the human Wikipedia halves use (without it such a step in a demo names a tool the pipeline lacks)
SEARCH_SUMMARY_TOOLS = ("WikiSearch", "WikiSearchSummary", "Read")
MERGES = ("lm", "random")


class LateFusionArguments(HumanProcessArguments):
    """:class:`LateFusion`'s arguments: the merge, each pipeline's agent budget, the random merge's seed."""

    merge: Literal[MERGES] = arg("lm")  # type: ignore[valid-type]
    max_iters: int = arg(MAX_ITERS, high=20)
    k: int = arg(3, high=20)
    seed: int = arg(0)
    demo_form: Literal[DEMO_FORMS] = arg("full")  # type: ignore[valid-type]
    search_summary: bool = arg(False)


class LateFusion(Program):
    needs_toolbox = writes_sparql = per_question_demos = humaniq_processes = True
    Arguments = LateFusionArguments

    def __init__(self, merge: str = "lm", max_iters: int = MAX_ITERS, k: int = 3, seed: int = 0, toolbox=None,
                 demo_form: str = "full", answer_mode: str | None = None, choices: int | None = None,
                 demos: str = "dpp", shots: int = 3, human_library: str | None = None, search_summary: bool = False,
                 ranker: str = "hand"):
        super().__init__()
        args = self.take_arguments(locals())
        self.merge_mode = merge
        self.seed = seed
        self.init_human_processes(demos, shots, human_library)
        agent = dict(max_iters=max_iters, k=k, merge=False, toolbox=toolbox, demo_form=demo_form)
        self.text_agent = HumanIQAgent(tools=SEARCH_SUMMARY_TOOLS if search_summary else UNSTRUCTURED_TOOLS, **agent)
        self.kg_agent = HumanIQAgent(tools=STRUCTURED_TOOLS, **agent)
        self.toolbox = toolbox
        self.sources = SourceMerge(args["choices"], args["answer_mode"], ranker)

    def human_demo_builders(self) -> dict[str, HumanDemoSpec]:
        """The text agent learns from the Wikipedia halves of the human processes, the KG agent from the Wikidata
        halves; the merge from the human merge examples."""
        out = {f"{part}.{name}": spec for part in ("text_agent", "kg_agent")
               for name, spec in getattr(self, part).human_demo_builders().items() if name != "sources.merge"}
        return {**out, "sources.merge": HumanDemoSpec("merge")}

    def forward(self, question: str) -> dspy.Prediction:
        trace = new_trace("latefusion", question)
        text_trace, kg_trace = new_trace("text-only", question), new_trace("kg-only", question)
        evidence: dict[str, list] = {}
        _, text_answers = self.text_agent.run_tools(question, text_trace, evidence)
        _, kg_answers = self.kg_agent.run_tools(question, kg_trace, evidence)
        text, kg = text_answers["text"], kg_answers["kg"]
        tb = self.toolbox_or_fail()
        trace.pipelines = {"text": text_trace, "kg": kg_trace}
        trace.tool_calls = text_trace.tool_calls + kg_trace.tool_calls
        trace.sparql = kg_trace.sparql
        if self.merge_mode == "lm":
            context = " ".join(f"{name}: {r}" for name, r in (("Wikipedia pipeline", text_answers["response"]),
                                                               ("Wikidata pipeline", kg_answers["response"])) if r)
            merged = self.sources(question, text, kg, evidence=evidence, toolbox=tb, context=context)
            trace.add(merged.trace)
            text, kg, final = merged.text, merged.kg, merged.answer
            trace.answers.parametric = merged.parametric
        else:  # the pipelines' own answers, in every answer mode (grounding never replaces what they found)
            options = [a for a in (text, kg) if a]
            rng = random.Random(self.seed ^ zlib.crc32(question.encode("utf-8")))
            final = rng.choice(options) if options else ""
        trace.answers.text, trace.answers.kg, trace.answers.final = text, kg, final
        trace.merge = self.merge_mode
        return dspy.Prediction(answer=final, trace=trace.to_dict())

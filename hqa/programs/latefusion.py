"""HumanIQ's late-fusion baseline: a text-only agent and a KG-only agent run separately, merged afterwards.

``merge="lm"`` merges with the MergeAnswers signature (with the parametric answer; in grounded answer mode it picks
one of the source answers); ``merge="random"`` picks one of
the non-empty source answers uniformly (seeded per question), as in the HumanIQ ablation.
"""

from __future__ import annotations

import random
import zlib

import dspy

from hqa.programs.common import HumanDemoSpec, new_trace
from hqa.programs.grounded import SourceMerge, resolve_answer_mode
from hqa.programs.hqa_agent import HQAAgent
from hqa.programs.tools import KG_TOOLS, TEXT_TOOLS
from hqa.retrievers.registry import get_toolbox


class LateFusion(dspy.Module):
    def __init__(self, merge: str = "lm", max_iters: int = 6, k: int = 3, seed: int = 0, toolbox: str = "default"):
        super().__init__()
        if merge not in ("lm", "random"):
            raise ValueError("merge must be 'lm' or 'random'")
        self.merge_mode = merge
        self.seed = seed
        self.text_agent = HQAAgent(max_iters=max_iters, k=k, tools=TEXT_TOOLS, merge=False, toolbox=toolbox)
        self.kg_agent = HQAAgent(max_iters=max_iters, k=k, tools=KG_TOOLS, merge=False, toolbox=toolbox)
        self.sources = SourceMerge()

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
        tb = get_toolbox(self.text_agent.toolbox)
        trace["pipelines"] = {"text": text_trace, "kg": kg_trace}
        trace["tool_calls"] = text_trace["tool_calls"] + kg_trace["tool_calls"]
        trace["sparql"] = kg_trace["sparql"]
        if self.merge_mode == "lm":
            final = self.sources(question, text, kg, trace, tb.settings, evidence=evidence, toolbox=tb)
            text, kg = trace["answers"]["text"], trace["answers"]["kg"]
        else:
            if resolve_answer_mode(None, tb.settings) == "grounded" and evidence:
                grounded = self.sources.ground(question, {"text": text, "kg": kg}, evidence, tb, trace)
                text, kg = grounded["text"], grounded["kg"]
            options = [a for a in (text, kg) if a]
            rng = random.Random(self.seed ^ zlib.crc32(question.encode("utf-8")))
            final = rng.choice(options) if options else ""
        trace["answers"].update(text=text, kg=kg, final=final)
        trace["merge"] = self.merge_mode
        return dspy.Prediction(answer=final, trace=trace)

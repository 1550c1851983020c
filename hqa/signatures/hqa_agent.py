"""Signatures of the HQA / HumanIQ agent and its baselines."""

from __future__ import annotations

from typing import Literal

import dspy

ToolName = Literal["WikiSearch", "WikiSearchSummary", "Read", "GetWikidataID", "GenerateSparql", "RunSparql",
                   "GetLabel", "Finish"]


class AgentStep(dspy.Signature):
    """Answer the question by using tools, one step at a time, like the solution processes in the examples.

    Tools:
    - WikiSearch(query): search Wikipedia-style passages; returns "Page: title / Summary: text" blocks.
    - Read(title): the full passage of a page title found by WikiSearch.
    - GetWikidataID(entity name): Wikidata QIDs for an entity mention, best first.
    - GenerateSparql(question or sub-question with QIDs): writes a Wikidata SPARQL query.
    - RunSparql(query): runs a SPARQL query over Wikidata and returns its rows.
    - GetLabel(QIDs): the English labels of Wikidata ids.
    - Finish(answers): stop; give "Wikipedia_Answer: <answer from text>, Wikidata_Answer: [<answer from Wikidata>]".
    Use both Wikipedia and Wikidata when you can, and Finish as soon as you know the answer."""

    question: str = dspy.InputField()
    trajectory: str = dspy.InputField(desc="the Thought/Action/Action Input/Observation steps so far")
    next_thought: str = dspy.OutputField(desc="reasoning about what to do next")
    next_tool_name: ToolName = dspy.OutputField()
    next_tool_args: str = dspy.OutputField(desc="the tool's input")


class GenerateSparql(dspy.Signature):
    """Write one SPARQL query for Wikidata that answers the question. Use wd:Q… for entities and wdt:P… for
    properties from the candidates given; the prefixes wd:, wdt:, p:, ps:, rdfs: are predefined. Return only the
    query."""

    question: str = dspy.InputField()
    entities: list[str] = dspy.InputField(desc="candidate entities as 'Qid: label (description)'")
    relations: list[str] = dspy.InputField(desc="candidate properties as 'Pid: label'")
    sparql: str = dspy.OutputField(desc="a SELECT or ASK query")


class GenerateSquall(dspy.Signature):
    """Write one SQUALL query that answers the question over Wikidata (HumanIQ §3: generateQuery has the LM write
    SQUALL, which hqa translates to SPARQL). SQUALL is controlled English: a question in plain words whose terms are
    Wikidata ids written <id:label>, e.g. <Q11424:film>, <P57:director>. Follow the examples' phrasing:
    "Which <class> has <property> <entity>?", "Who is the <property> of <entity>?", "is-<property> <entity>",
    "is a <property> of <entity>", "at <qualifier> value", "has the highest / earliest / latest <property>",
    "How many <class> …?", "Has <entity> a <property> whose year is earlier than 2000?", "has not …", and join
    conditions with "and" / "that". Use the given entities' ids. Return only the query, on one line."""

    question: str = dspy.InputField()
    entities: list[str] = dspy.InputField(desc="entities of the question as 'Qid: label (description)'")
    squall: str = dspy.OutputField(desc="one SQUALL query with <Qid:label> / <Pid:label> terms")


class ReadAnswer(dspy.Signature):
    """Answer the question from the passages only. If they do not contain the answer, reply "None"."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField()
    answer: str = dspy.OutputField(desc="short answer or None")


# The agent's answers when it stopped without Finish: both source answers and the assistant response the final
# response generation reads (HumanIQ §3's "workflow response"); hqa's own step (the paper's agent always finishes or
# hits its iteration limit, error category 4 of Table 9).
class ExtractAnswers(dspy.Signature):
    """Read the solution process and state the answer it found in Wikipedia passages and the answer it found in
    Wikidata. Use "None" for a source that gave no answer. Short answers only. Then write the assistant response:
    a few sentences on what the steps found in each source and how they support the answer."""

    question: str = dspy.InputField()
    trajectory: str = dspy.InputField()
    wikipedia_answer: str = dspy.OutputField(desc="answer supported by the Wikipedia observations, or None")
    wikidata_answer: str = dspy.OutputField(desc="answer supported by the Wikidata observations, or None")
    assistant_response: str = dspy.OutputField(desc="the evidence found and the reasoning, in a few sentences")


# HumanIQ §3, final response generation: one LM request over the question, the parametric answer and the workflow
# response (the per-source answers and ``context``, the workflow's assistant response), with the benchmark's merge
# few-shots (question, both source answers, internal knowledge, Context, answer) as demos.  The instruction wording
# is hqa's own; the authors' prompt is not copied.
class MergeAnswers(dspy.Signature):
    """Give the short final answer to the question. You are shown the answer found in Wikipedia (text), the answer
    found in Wikidata (knowledge graph), your own answer from memory (internal knowledge), and the context: what the
    search for evidence found and concluded. Weigh them against each other and against the context; an answer is
    "None" when that source gave none."""

    question: str = dspy.InputField()
    wikipedia_answer: str = dspy.InputField()
    wikidata_answer: str = dspy.InputField()
    internal_knowledge: str = dspy.InputField()
    context: str = dspy.InputField(desc="the workflow's response: evidence obtained and the thoughts about it")
    answer: str = dspy.OutputField(desc="short final answer")

"""The 59 human solution processes replayed through hqa's tools on the pack (issue 26).

A scripted LM plays each human: the agent's step predictor is answered with the human's recorded steps, in order,
then the human's Finish; WikiSearch's relevant-page LM is answered with the page the human's observation shows (so
what is tested is whether the search found that page among its top three).  The tools' observations are compared
with the recorded ones, per tool:

* WikiSearch: the recorded page is the one kept; WikiSearchSummary: the same top page per keyword;
* GetWikidataID / GetLabel: the same list (HumanIQ's messages included);
* RunSparql: every recorded call that returned values is *reproduced* (hqa returns the recorded values), *not
  reproducible* from what was recorded (:func:`hqa.world.pack.observations.unseen_values`: the query needs values the
  recording never showed, which the pack never invents), or *hqa's fault* (a pattern, statement, qualifier or label the pack
  could have kept, or a result rendered differently) — the last class must stay empty;
* GenerateSparql is not compared here (its LM writes the query; tests/test_squall*.py cover it).

The shares per tool are printed with the test output.
"""

from __future__ import annotations

import ast
from collections import Counter, defaultdict

import dspy
import pytest
from conftest import DemoSensitiveLM

from hqa.data.human import load_human_library
from hqa.world.pack.observations import _strip_list, parse_result_rows, passages_from_observation, unseen_values
from hqa.programs.humaniq import HumanIQAgent
from hqa.toolbox import Toolbox


class HumanReplayLM(DemoSensitiveLM):
    """Answers the agent's step predictor with one human's recorded steps, then the human's Finish; WikiSearch's
    relevant-page LM with the page (title and summary) the human's observation shows, else its message; every other
    predictor with "None"."""

    def __init__(self, demo):
        super().__init__()
        self.steps = [s for s in demo.steps if s.action]
        self.finish = (f"Wikipedia_Answer: {demo.wikipedia_answer or 'None'}, "
                       f"Wikidata_Answer: [{(demo.wikidata_answer or 'None').strip('[]')}]")
        self.next = 0

    def reply(self, messages):
        from conftest import _FIELD_NAME, _OUTPUT_FIELDS

        system = next((m["content"] for m in messages if m.get("role") == "system"), "")
        block = _OUTPUT_FIELDS.search(system)
        names = _FIELD_NAME.findall(block.group(1)) if block else ["answer"]
        if "next_tool_name" in names:
            if self.next < len(self.steps):
                s = self.steps[self.next]
                values = {"next_thought": s.thought or "next", "next_tool_name": s.action,
                          "next_tool_args": s.action_input or "none"}
            else:
                values = {"next_thought": "I now know the final answer.", "next_tool_name": "Finish",
                          "next_tool_args": self.finish}
            self.next += 1
        elif set(names) == {"title", "summary"}:
            recorded = self.steps[self.next - 1].observation
            pages = passages_from_observation(recorded)
            values = {"title": pages[0][0], "summary": pages[0][1]} if pages else {"title": "None",
                                                                                 "summary": recorded}
        else:
            values = {n: "None" for n in names}
        return self._format_answer_fields(values)


def _items(text: str) -> list[str]:
    """A recorded or produced list observation as its items (the recordings write ``['[Q30]']``, ``['Lucy ']``)."""
    if not (text or "").lstrip().startswith("["):
        return [(text or "").strip()]
    return [i.strip() for i in _strip_list(text)]


def _values(rows) -> set[str]:
    return {v for r in rows or [] for v in r.values()}


def classify(step, observation: str) -> str:
    """The class of one replayed step (see the module docstring)."""
    tool, recorded = step.action, step.observation
    if tool == "WikiSearch":
        pages = passages_from_observation(recorded)
        if not pages:
            return "no page recorded"
        return "reproduced" if observation.casefold().startswith(f"page: {pages[0][0]}\n".casefold()) else "differs"
    if tool == "WikiSearchSummary":
        want = [t.casefold() for t, _ in passages_from_observation(recorded)]
        got = [t.casefold() for t, _ in passages_from_observation(observation)]
        return "reproduced" if want == got else "differs"
    if tool in ("GetWikidataID", "GetLabel"):
        return "reproduced" if _items(recorded) == _items(observation) else "differs"
    if tool == "RunSparql":
        rows = parse_result_rows(recorded)
        if not rows:
            return "no values recorded: none returned" if not _values(parse_result_rows(observation)) else \
                "no values recorded: values returned"
        if _values(rows) <= _values(parse_result_rows(observation)):
            return "reproduced"
        return "not reproducible" if unseen_values(step.action_input, rows) else "hqa's fault"
    return "not compared"


@pytest.fixture(scope="module")
def replay(built_pack):
    """Every human process replayed: ``[(demo id, recorded step, observation, class)]``."""
    from hqa.config import load_settings
    from pathlib import Path

    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(built_pack),
                             programs_answer_mode="free")
    human_replay_tb = Toolbox(settings)
    out = []
    for demo in load_human_library():
        lm = HumanReplayLM(demo)
        with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
            pred = HumanIQAgent(max_iters=20, max_repeats=10,
                                toolbox=human_replay_tb)(question=demo.question)
        calls = iter(pred.trace["tool_calls"])
        steps = [s for s in demo.steps if s.action]
        ran = pred.trace["steps"]
        assert [s["tool"] for s in ran[:len(steps)]] == [s.action for s in steps], demo.id  # every step issued
        for step, done in zip(steps, ran):
            observation = done["observation"] if done["observation"].startswith("Already done") else next(calls)[
                "output"]
            out.append((demo.id, step, observation, classify(step, observation)))
    return out


def test_replay_shares_per_tool(replay, capsys):
    """Prints the shares; the human processes all ran through (59 processes) and every tool is exercised."""
    table: dict[str, Counter] = defaultdict(Counter)
    for _id, step, _obs, cls in replay:
        table[step.action][cls] += 1
    with capsys.disabled():
        print("\nhuman solution processes replayed on the pack (59 processes, issue 26):")
        for tool in ("WikiSearch", "WikiSearchSummary", "GetWikidataID", "GenerateSparql", "RunSparql", "GetLabel"):
            n = sum(table[tool].values())
            shares = ", ".join(f"{c} {k} ({k / n:.0%})" for c, k in sorted(table[tool].items()))
            print(f"  {tool:18} {n:3} calls: {shares}")
        for i, step, obs, cls in replay:
            if cls == "differs":
                print(f"  differs: {i} {step.action}({step.action_input[:60]!r}): recorded {step.observation[:70]!r}"
                      f" / hqa {obs[:70]!r}")
    assert len({i for i, *_ in replay}) == 59
    assert set(table) == {"WikiSearch", "WikiSearchSummary", "GetWikidataID", "GenerateSparql", "RunSparql",
                          "GetLabel"}


def test_recorded_sparql_values_are_reproduced_or_not_reproducible_never_hqas_fault(replay, capsys):
    """Each of the recorded RunSparql calls that returned values: reproduced, or not reproducible from the
    recording (its reason printed); hqa's fault must be zero."""
    valued = [(i, s, o, c) for i, s, o, c in replay if s.action == "RunSparql" and parse_result_rows(s.observation)]
    counts = Counter(c for *_x, c in valued)
    with capsys.disabled():
        print(f"\nRunSparql calls with recorded values: {len(valued)}: " +
              ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        for i, s, _o, c in valued:
            if c != "reproduced":
                print(f"  {i}: {c}: {unseen_values(s.action_input, parse_result_rows(s.observation))}")
    faults = [(i, s.action_input, o[:200]) for i, s, o, c in valued if c == "hqa's fault"]
    assert faults == []
    assert len(valued) == 63 and counts["reproduced"] >= 46


def test_lists_and_messages_are_the_recorded_ones(replay):
    """GetWikidataID and GetLabel give the recorded lists (and HumanIQ's messages where the recording has them)."""
    differs = {(i, s.action) for i, s, o, c in replay if s.action in ("GetWikidataID", "GetLabel") and
               c != "reproduced"}
    # the recordings disagree with themselves there: "The Lord of the Rings (film series)" is Q208460 in one process
    # and Q190214 in two (the map keeps the majority); GetLabel took "Q81925268" without brackets in one process and
    # refused "Q7497770" with its list-format message in another (hqa follows the refusal, which the code also has)
    assert differs == {("mintaka:5", "GetWikidataID"), ("mintaka:4", "GetLabel")}
    message = [o for i, s, o, c in replay if s.action == "GetLabel" and not s.observation.startswith("[")]
    assert message == ["Try again by passing values in a Python List format with comma separated values!"]
    sparql = [o for i, s, o, c in replay if s.action == "RunSparql" and parse_result_rows(s.observation)]
    assert all(ast.literal_eval(o).keys() == {"message"} for o in sparql)  # HumanIQ's {'message': ...}


def test_searches_find_the_recorded_pages(replay):
    """WikiSearch keeps the page the human's observation shows, WikiSearchSummary gives the recorded top page."""
    rows = [(i, s.action) for i, s, o, c in replay if s.action in ("WikiSearch", "WikiSearchSummary") and
            c not in ("reproduced", "no page recorded")]
    # one search ranks a sibling list first: Wikipedia's engine and MiniLM over the pack's 187 passages differ there
    assert rows == [("mintaka:0", "WikiSearchSummary")]
    assert sum(s.action == "WikiSearch" and c == "reproduced" for i, s, o, c in replay) == 76

"""A human trace becomes a complete HumanIQ demo ending in Finish (the agent runs over the pack are in
tests/integration/test_humaniq_agent.py)."""

from hqa.programs.humaniq import human_react_demo


def test_human_trace_becomes_a_complete_finish_demo():
    from hqa.data.human import load_human_library

    demo = load_human_library(("mintaka",))[0]
    ex = human_react_demo(demo)
    assert ex.next_tool_name == "Finish" and "Missouri River" in ex.next_tool_args
    assert ex.trajectory.count("Action:") == len(demo.actions)  # the whole solution process is in the demo

"""``POST /v1/ask/stream`` on a real uvicorn on 127.0.0.1: the HQA agent's steps arrive as server-sent events while
the program is still running (its LM blocks until the test has seen the first step), then one ``answer`` event with
what ``/v1/ask`` returns: usage, labelled SPARQL ids."""

from __future__ import annotations

import json

import dspy
import httpx
from lmkit import BlockingLM
from prockit import AGENT_SCRIPT, agent_app, serving

Q = "What is the capital of Gabon?"


def test_steps_stream_while_the_program_runs(settings_for):
    lm = BlockingLM(list(AGENT_SCRIPT))
    try:
        _agent, app = agent_app(settings_for, lm)
        seen: list[tuple[str, dict]] = []
        inflight_at_first_step = None
        with serving(app) as port:
            with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/ask/stream", json={"question": Q},
                              timeout=120) as r:
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                event = None
                for line in r.iter_lines():
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: "):
                        seen.append((event, json.loads(line[6:])))
                        if seen[-1][0] == "step" and seen[-1][1]["status"] == "done" and not lm.release.is_set():
                            inflight_at_first_step = app.state.hqa.inflight  # the LM is still blocked
                            lm.release.set()
    finally:
        lm.release.set()
        dspy.configure(lm=None)
    assert inflight_at_first_step == 1  # the first step arrived while the question was still being answered
    done = [e for kind, e in seen if kind == "step" and e["status"] == "done"]
    assert [e["predictor"] for e in done] == ["react"] * 3 + ["relevant_page", "react", "sources.parametric",
                                                              "sources.merge"]
    steps = [e["outputs"].get("next_tool_name") for e in done if e["predictor"] == "react"]
    assert steps == ["GetWikidataID", "RunSparql", "WikiSearch", "Finish"]
    assert done[0]["inputs"]["question"] == Q
    kinds = [kind for kind, _ in seen]
    assert kinds[-1] == "answer" and kinds.count("answer") == 1 and "error" not in kinds
    final = seen[-1][1]
    assert final["answer"] == "Libreville" and final["status"] == 200
    assert final["usage"]["lm_calls"] == len(AGENT_SCRIPT) and final["usage"]["tool_calls"] == 3
    assert final["labels"]["Q3825"] == "Libreville"  # the SPARQL row's IRI, labelled from the pack

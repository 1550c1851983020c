"""SS-CoT trace checks shared by the SS-CoT tests: a step of a trace by name, and a trace's well-formedness."""

from __future__ import annotations

from hqa.programs import sscot_chain as C


def check_well_formed(trace, n_samples):
    assert trace["program"] == "sscot"
    assert len(trace["chains"]) == n_samples
    for s in trace["chains"]:
        assert set(s) >= {"sample", "chain", "errors", "canonical"}
        assert all(e in C.ERROR_TYPES for e in s["errors"])
    assert trace["valid_chains"] == [s["chain"] for s in trace["chains"] if not s["errors"]]
    for f in trace["fills"]:
        assert f["via"] in ("kg", "text", "lm") and f["mask"].startswith("#")
    assert set(trace["answers"]) == {"parametric", "text", "kg", "final"}


def step(trace, name):
    (s,) = [s for s in trace["steps"] if s["step"] == name]
    return s

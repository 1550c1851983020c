"""Evidence-grounded answering: candidates drawn from the evidence, one of them chosen by the LM (DummyLM and a
scripted llama.cpp stand-in), free text by configuration."""

from __future__ import annotations

import json

import pytest


@pytest.mark.real_lm
def test_hqa_ask_readme_example_with_the_embedded_model(built_pack, tmp_path):
    """The README example through the CLI with SmolLM2-135M: the grounded answer is the author."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env["HQA_PATHS__ARTIFACTS"] = str(built_pack)
    proc = subprocess.run([sys.executable, "-m", "hqa.cli", "ask", "--json", "Who is the author of Animal Farm?"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    trace = out.get("trace", out)
    assert trace["answer_mode"] == "grounded" and "George Orwell" in trace["candidates"]
    assert out["answer"] == "George Orwell"

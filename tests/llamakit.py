"""A real ``python -m llama_cpp.server`` for the tests (issue 53): the server as docs/serving.md's recipe starts it,
behind a recording proxy, and the check every program's run against it makes.  The fixture ``llama_server`` is in
tests/conftest.py (one server per test module); test_llama_server_programs.py and test_llama_server_agents.py split
the programs so the suite's two workers share them."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager

import pytest

from prockit import run_hqa, start
from standins.servers import RecordingProxy, free_port, stop, wait_http


@contextmanager
def llama_server_behind_a_proxy():
    """``llama_cpp.server`` with the shipped GGUF (``--n_ctx 8192 --n_threads 2``), behind a
    :class:`~standins.servers.RecordingProxy` (the requests hqa sent, the server's replies); stopped at the end."""
    from hqa.lm.models import packaged_gguf

    port = free_port()
    proc = start([sys.executable, "-m", "llama_cpp.server", "--model", str(packaged_gguf()), "--host", "127.0.0.1",
                  "--port", str(port), "--n_ctx", "8192", "--n_threads", "2", "--model_alias", "smollm2"])
    proxy = None
    try:
        wait_http(f"http://127.0.0.1:{port}/v1/models", proc)
        proxy = RecordingProxy(f"http://127.0.0.1:{port}").start()
        yield proxy
    finally:
        if proxy is not None:
            proxy.stop()
        stop(proc)


def evaluate_on_the_server(proxy, program: str, args: list[str], tmp_path, built_pack) -> dict:
    """``hqa evaluate`` of ``program`` (``args``: its options) on the first answerable CompMix test question over the
    server, the programs run as with the embedded model (``answer_mode`` and ``abstain`` are ``auto``: grounded and
    on for the embedded LM, free and off for a remote one, which hqa cannot tell is the same 135M model) and the
    recipe's ``repeat_penalty`` 1.0, replies of at most 96 tokens; its row."""
    out = tmp_path / "run"
    env = {"HQA_LM__PROVIDER": "openai_compatible", "HQA_LM__API_BASE": proxy.api_base, "HQA_LM__MODEL": "smollm2",
           "HQA_LM__EXTRA_BODY": json.dumps({"repeat_penalty": 1.0}), "HQA_PROGRAMS__ANSWER_MODE": "grounded",
           "HQA_PROGRAMS__ABSTAIN": "on", "HQA_LM__CACHE": "false", "HQA_LM__TIMEOUT": "900",
           "HQA_LM__MAX_TOKENS": "96",  # the suite's time: a reply cut there is allowed to fail (check_program_...)
           "HQA_PATHS__ARTIFACTS": str(built_pack), "HQA_TRACKING__URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    proc = run_hqa("evaluate", "--program", program, *args, "--dataset", "compmix/test:answerable", "--limit", "1",
                   "--no-estimate", "--out", str(out), cwd=tmp_path, timeout=900, env_extra=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "predictions.jsonl").read_text().splitlines()[0])


def check_program_on_the_server(proxy, program: str, args: list[str], tmp_path, built_pack) -> None:
    """The schema reached the server on every request in llama-cpp-python's spelling, and every reply the server
    finished parsed: a parse failure is only ever a reply cut at ``max_tokens`` (the embedded engine's grammar cuts
    them the same way; the rates in-process vs server are benchmarks/bench_lm_server.py's)."""
    before, replied = len(proxy.bodies), len(proxy.finishes)
    row = evaluate_on_the_server(proxy, program, args, tmp_path, built_pack)
    questions = [b for b in proxy.bodies[before:] if b.get("max_tokens") != 24]  # the probe asks for 24 tokens
    # every request the server got is one of the row's, or DSPy's retry of one (a client timeout on a loaded machine)
    assert row["lm_calls"] >= 1 and len(questions) == row["lm_calls"] + row["retries"], (row, len(questions))
    for body in questions:
        fmt = body["response_format"]
        assert fmt["type"] == "json_object" and fmt["schema"]["type"] == "object" and fmt["schema"]["required"]
        assert body["repeat_penalty"] == 1.0
    assert row["error"] is None
    cut = sum(1 for reason in proxy.finishes[replied:] if reason == "length")
    assert row["parse_failures"] <= cut, (row["parse_failures"], cut, row.get("fallback"))


def server_checks(programs: dict[str, list[str]]):
    """The test function of a real-server test file: :func:`check_program_on_the_server` for each of ``programs``
    (name → its ``hqa evaluate`` options).  The programs are split over two files so that the suite's two workers
    share their minutes."""

    @pytest.mark.server
    @pytest.mark.real_lm
    @pytest.mark.parametrize("program", sorted(programs))
    def test_the_program_sends_its_schema_to_llama_cpp_server_and_its_replies_parse(llama_server, built_pack, tmp_path,
                                                                                   program):
        check_program_on_the_server(llama_server, program, programs[program], tmp_path, built_pack)

    return test_the_program_sends_its_schema_to_llama_cpp_server_and_its_replies_parse

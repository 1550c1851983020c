"""The LM and knowledge sources switch by configuration alone."""

import json
from pathlib import Path


from hqa.config import load_settings
from hqa.lm.models import build_lm

NOFILE = Path("/nonexistent-hqa.toml")


def test_openai_compatible_wire_keeps_max_tokens_and_the_json_fallback():
    """What an OpenAI-compatible server receives from DSPy's own engine (issue 38): ``max_tokens`` (llama-cpp-python's
    server ignores ``max_completion_tokens``), and when the chat format cannot be parsed, the JSON retry asks for
    the response format named in ``lm.response_format`` — here plain JSON mode, ``{"type": "json_object"}`` (without
    one a small model answers the retry with free text; the schema spellings are tested in
    tests/integration/test_response_format.py, against the stand-in and a real llama_cpp.server)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import dspy

    from hqa.signatures.basic import ClosedBookAnswer

    bodies: list[dict] = []

    class Chat(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            bodies.append(body)
            # free text for the chat format (unparsable), a JSON object when JSON mode is asked for
            content = json.dumps({"answer": "4"}) if body.get("response_format") else "four, I think"
            out = json.dumps({"id": "c1", "object": "chat.completion", "created": 0, "model": body["model"],
                              "choices": [{"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": content}}],
                              "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Chat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        lm = build_lm(load_settings(NOFILE, environ={}, lm_provider="openai_compatible", lm_model="smollm2",
                                    lm_api_base=f"http://127.0.0.1:{server.server_port}/v1", lm_cache=False,
                                    lm_max_tokens=48, lm_num_retries=0, lm_response_format="json_object"))
        with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
            assert dspy.Predict(ClosedBookAnswer)(question="2 + 2?").answer == "4"
    finally:
        server.shutdown()
        server.server_close()
    assert [b.get("response_format") for b in bodies] == [None, {"type": "json_object"}]
    assert all(b["model"] == "smollm2" and b["max_tokens"] == 48 and "max_completion_tokens" not in b for b in bodies)

"""Bounds under hostile input (issue 40), each on the real stack: uvicorn with hqa's h11 protocol on 127.0.0.1, real
world builds, real config loading, real artifacts and the HTTP layer against a loopback server.

- the body limit counts the bytes received whatever the framing (chunked, Content-Length with Transfer-Encoding,
  none), with and without an API key;
- a connection whose headers (or body) trickle is closed (408 for the body);
- a timed-out question's work is cancelled, counted in /healthz until it stops, and the next question is answered;
- ``world build --force`` with an empty dump is refused unless ``--allow-empty``; ``world remove`` on a link removes
  the link only;
- a config given as a pipe is read; a terminal is refused in one line;
- the manifest is checksummed and a missing manifest is refused;
- a Retry-After beyond the cap is an outage at once, for that request and the host's next ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import dspy
import httpx
import pytest
from prockit import Recorder, run_hqa, serving  # a program recording the questions it is asked; uvicorn

from hqa.app import OpenedProgram
from hqa.serve import ServeOptions, create_app

REPO = Path(__file__).resolve().parent.parent.parent
KEY = "s3cret"
SENT = 96 * 1024  # past the 64 KiB cap and within socket buffers, so sending never waits for the server to read


def hqa(*args: str, **kwargs):
    return run_hqa(*args, timeout=600, **kwargs)  # the bound this file's commands always had


def one_line(proc, needle: str, code: int = 2) -> str:
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hqa: error: ") and needle in lines[0], proc.stderr
    return lines[0]


# -- the server ------------------------------------------------------------------------------------------------


def app_for(program, key: str | None, **options):
    return create_app(OpenedProgram(program, label="rec", kind="rec", source="program"),
                      options=ServeOptions(api_key=key, **options))


def send(port: int, head: dict[str, str], body: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    lines = ["POST /v1/ask HTTP/1.1", "Host: 127.0.0.1"] + [f"{k}: {v}" for k, v in head.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    return sock


def reply(sock: socket.socket) -> tuple[int, bytes]:
    """(status, everything the server sent until it closed the connection)."""
    data = b""
    with sock:
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:  # closed with the client's unread bytes still queued: what came before counts
                break
            if not chunk:
                break
            data += chunk
    assert data.startswith(b"HTTP/1.1 "), data[:200]
    return int(data.split(b" ", 2)[1]), data


def chunks(total: int, size: int = 8192) -> bytes:
    piece = b"x" * size
    return b"".join(b"%x\r\n%s\r\n" % (size, piece) for _ in range(total // size))


@pytest.mark.parametrize("key", [KEY, None], ids=["keyed", "keyless-loopback"])
def test_the_body_limit_counts_received_bytes_whatever_the_framing(key):
    """A body that never ends: unless the server counts what arrives and refuses at the cap, it waits for the rest
    and the reply never comes (the socket's 120 s guard then fails the test)."""
    program, app = (p := Recorder()), app_for(p, key)
    auth = {"Authorization": f"Bearer {key}"} if key else {}
    json_head = {"Content-Type": "application/json", **auth}
    with serving(app) as port:
        # the probe of issue 40: a small declared length, the body framed as chunked, past the cap and unfinished
        smuggled = reply(send(port, {**json_head, "Content-Length": "10", "Transfer-Encoding": "chunked"},
                              chunks(SENT)))
        chunked = reply(send(port, {**json_head, "Transfer-Encoding": "chunked"}, chunks(SENT)))
        # no length at all: a request without Content-Length or chunked framing has no body (RFC 9112 section 6.3),
        # so what follows the headers is never read as one
        raw = socket.create_connection(("127.0.0.1", port), timeout=120)
        auth_line = f"Authorization: Bearer {key}\r\n" if key else ""
        raw.sendall(f"POST /v1/ask HTTP/1.0\r\nContent-Type: application/json\r\n{auth_line}\r\n".encode()
                    + b"x" * SENT)
        no_length = reply(raw)
        ok = httpx.post(f"http://127.0.0.1:{port}/v1/ask", json={"question": "q"}, headers=auth, timeout=120)
        small_chunked = httpx.post(f"http://127.0.0.1:{port}/v1/ask", content=iter([b'{"question": ', b'"r"}']),
                                   headers=json_head, timeout=120)
    assert smuggled[0] in (400, 413) and b"connection: close" in smuggled[1].lower()
    assert chunked[0] == 413 and b"larger than 65536 bytes" in chunked[1]
    assert no_length[0] == 422 and b"body: Field required" in no_length[1]  # an empty body
    assert ok.status_code == 200 and small_chunked.status_code == 200, small_chunked.text
    assert program.asked == ["q", "r"]  # none of the refused bodies reached the program


def test_headers_and_bodies_that_trickle_are_cut_off_and_others_are_served():
    program, app = (p := Recorder()), app_for(p, None, read_timeout=0.5)
    with serving(app, header_timeout=0.5) as port:
        slow_headers = socket.create_connection(("127.0.0.1", port), timeout=120)
        slow_headers.sendall(b"POST /v1/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nX-a: ")  # and never the rest
        slow_body = send(port, {"Content-Type": "application/json", "Content-Length": "100"}, b'{"question"')
        ok = httpx.post(f"http://127.0.0.1:{port}/v1/ask", json={"question": "q"}, timeout=120)
        with slow_headers:
            assert slow_headers.recv(100) == b""  # closed by the server (a wait for the client's 120 s otherwise)
        status, data = reply(slow_body)
    assert status == 408 and b"not received within 0.5s" in data
    assert ok.status_code == 200 and program.asked == ["q"]


def test_a_body_trickled_in_small_pieces_meets_the_deadline_of_the_whole_body():
    """Ten bytes a second, each piece well within ``read_timeout``, kept a connection open indefinitely; the whole
    body now has ``body_timeout``."""
    import select

    program, app = (p := Recorder()), app_for(p, None, read_timeout=30.0, body_timeout=0.5)
    with serving(app) as port:
        sock = send(port, {"Content-Type": "application/json", "Content-Length": "400"}, b'{"question": "')
        for _ in range(380):  # a byte every 20 ms until the server answers (8 s in all, were it never to)
            if select.select([sock], [], [], 0.02)[0]:
                break
            try:
                sock.sendall(b"x")
            except OSError:
                break
        status, data = reply(sock)
    assert status == 408 and b"request body not received within 0.5s" in data
    assert program.asked == []


class Stoppable:
    """A program that works for up to 10 s in small cancellable steps (:func:`hqa.io.cancel.sleep`)."""

    def __init__(self):
        self.finished: list[str] = []

    def __call__(self, question):
        from hqa.io import cancel

        for _ in range(200):
            cancel.sleep(0.05)
        self.finished.append(question)
        return dspy.Prediction(answer="late", trace={"program": "stoppable", "tool_calls": []})


def _until_idle(base: str) -> dict:
    health = httpx.get(f"{base}/healthz", timeout=120).json()
    while health["inflight"]:  # the cancelled work stops at its next step
        time.sleep(0.05)
        health = httpx.get(f"{base}/healthz", timeout=120).json()
    return health


def test_cancelled_work_ends_with_one_log_line_not_a_traceback(caplog):
    """A 504 and a streamed answer whose client went away each left "Future exception was never retrieved" and a
    traceback in the server log; the stream's work also ran on after its client had gone."""
    import gc
    import logging

    caplog.set_level(logging.INFO, logger="hqa.access")
    timed_out, gone = Stoppable(), Stoppable()
    with serving(app_for(timed_out, None, workers=1, timeout=0.3)) as port:
        base = f"http://127.0.0.1:{port}"
        assert httpx.post(f"{base}/v1/ask", json={"question": "q"}, timeout=120).status_code == 504
        _until_idle(base)
    with serving(app_for(gone, None, workers=1, timeout=60)) as port:
        base = f"http://127.0.0.1:{port}"
        with httpx.stream("POST", f"{base}/v1/ask/stream", json={"question": "q"}, timeout=120) as events:
            assert next(events.iter_lines()).startswith("event: ")  # the work has started; the client leaves
        health = _until_idle(base)
    gc.collect()  # asyncio reports an exception nobody retrieved when its future is collected
    text = [r.getMessage() for r in caplog.records]
    assert not [t for t in text if "never retrieved" in t or "destroyed but it is pending" in t], text
    ended = [json.loads(t) for t in text if "cancelled_work_ended" in t]
    assert [(e["why"], e["outcome"]) for e in ended] == [("timed out", "stopped"), ("client gone", "stopped")]
    assert timed_out.finished == gone.finished == [] and health["failed"] == 1


class Counted(BaseHTTPRequestHandler):
    """A loopback HTTP server's handler that counts the requests it gets (``hits``); subclasses answer."""

    protocol_version = "HTTP/1.1"
    hits = 0

    def log_message(self, *args):
        pass

    def reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in {**(headers or {}), "Content-Length": str(len(body))}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)


@contextlib.contextmanager
def loopback(handler: type[Counted]):
    """``handler`` served on 127.0.0.1 (its ``hits`` reset); yields the server's base URL."""
    handler.hits = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class Source(Counted):
    """A slow knowledge source: each answer takes 0.1 s."""

    def do_GET(self):
        type(self).hits += 1
        time.sleep(0.1)
        self.reply(200, b'{"ok": true}', {"Content-Type": "application/json"})


@pytest.fixture()
def source():
    with loopback(Source) as base:
        yield f"{base}/api"


class Crawler:
    """A program asking a source 300 times per question (~30 s of work) unless it is stopped; quick when asked
    "quick"."""

    def __init__(self, url: str):
        from hqa.config import HTTPConfig
        from hqa.retrievers.http import HTTPClient

        self.url, self.http = url, HTTPClient(HTTPConfig(cache_mode="off", timeout=60))
        self.finished: list[str] = []

    def __call__(self, question):
        if question != "quick":
            for i in range(300):
                self.http.get_json(self.url, {"i": str(i)})
        self.finished.append(question)
        return dspy.Prediction(answer="done", trace={"program": "crawler", "tool_calls": []})


def test_a_timed_out_question_is_cancelled_counted_until_it_stops_and_the_next_is_answered(source):
    program = Crawler(source)
    app = app_for(program, None, workers=1, timeout=1.0)
    with serving(app) as port:
        base = f"http://127.0.0.1:{port}"
        slow = httpx.post(f"{base}/v1/ask", json={"question": "crawl"}, timeout=120)
        health = httpx.get(f"{base}/healthz", timeout=120).json()
        while health["inflight"]:  # the cancelled work stops at its next source call
            time.sleep(0.05)
            health = httpx.get(f"{base}/healthz", timeout=120).json()
        hits = Source.hits
        quick = httpx.post(f"{base}/v1/ask", json={"question": "quick"}, timeout=120)
        after = httpx.get(f"{base}/healthz", timeout=120).json()
    assert slow.status_code == 504 and "cancelled" in slow.json()["error"]
    assert hits < 300 and Source.hits == hits  # it stopped asking the source; nothing more asked after it ended
    assert "crawl" not in program.finished
    assert quick.status_code == 200 and program.finished == ["quick"]
    assert after["inflight"] == 0 and after["cancelling"] == 0 and after["failed"] == 1 and after["served"] == 1


def test_healthz_counts_a_timed_out_question_while_its_work_still_runs(source):
    """A program that ignores cancellation (no hqa call between its steps) is still counted until it ends."""
    release = threading.Event()

    def stubborn(question):
        release.wait(120)
        return dspy.Prediction(answer="late", trace={"program": "stubborn", "tool_calls": []})

    app = app_for(stubborn, None, workers=1, timeout=0.5)
    with serving(app) as port:
        base = f"http://127.0.0.1:{port}"
        slow = httpx.post(f"{base}/v1/ask", json={"question": "q"}, timeout=120)
        during = httpx.get(f"{base}/healthz", timeout=120).json()
        release.set()
        after = during
        while after["inflight"]:
            time.sleep(0.05)
            after = httpx.get(f"{base}/healthz", timeout=120).json()
    assert slow.status_code == 504
    assert during["inflight"] == 1 and during["cancelling"] == 1
    assert after["inflight"] == 0 and after["cancelling"] == 0


# -- worlds ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    from worldkit import write_dumps

    out = tmp_path_factory.mktemp("dumps")
    write_dumps(out, kinds=("nt",))
    return out / "truthy.nt"


def test_force_with_an_empty_dump_is_refused_unless_allow_empty(dump, tmp_path):
    art = tmp_path / "artifacts"
    env = {"HQA_PATHS__ARTIFACTS": str(art)}
    built = hqa("world", "build", "tiny", "--wikidata", str(dump), "--quiet", cwd=tmp_path, env_extra=env)
    assert built.returncode == 0, built.stderr
    manifest = (art / "worlds" / "tiny" / "world.json").read_text()
    assert json.loads(manifest)["counts"]["triples"] > 0
    empty = tmp_path / "empty.nt"
    empty.write_text("")
    refused = hqa("world", "build", "tiny", "--force", "--wikidata", str(empty), "--quiet", cwd=tmp_path,
                  env_extra=env)
    one_line(refused, "yielded 0 triples")
    assert "untouched" in refused.stderr and "--allow-empty" in refused.stderr
    assert (art / "worlds" / "tiny" / "world.json").read_text() == manifest  # the old world stands
    allowed = hqa("world", "build", "tiny", "--force", "--allow-empty", "--wikidata", str(empty), "--quiet",
                  cwd=tmp_path, env_extra=env)
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads((art / "worlds" / "tiny" / "world.json").read_text())["counts"]["triples"] == 0


def test_remove_and_rebuild_never_act_through_a_link_on_its_target(dump, tmp_path):
    art = tmp_path / "artifacts"
    env = {"HQA_PATHS__ARTIFACTS": str(art)}
    real = tmp_path / "elsewhere" / "tiny"
    built = hqa("world", "build", "tiny", "--out", str(real), "--wikidata", str(dump), "--quiet", cwd=tmp_path,
                env_extra=env)
    assert built.returncode == 0, built.stderr
    manifest = (real / "world.json").read_text()
    (art / "worlds").mkdir(parents=True)
    link = art / "worlds" / "tiny"
    link.symlink_to(real)
    rebuilt = hqa("world", "build", "tiny", "--force", "--wikidata", str(dump), "--quiet", cwd=tmp_path,
                  env_extra=env)
    one_line(rebuilt, "is a symbolic link")
    removed = hqa("world", "remove", "tiny", cwd=tmp_path, env_extra=env)
    assert removed.returncode == 0, removed.stderr
    assert "removed the link" in removed.stdout and not link.exists() and not link.is_symlink()
    assert (real / "world.json").read_text() == manifest and (real / "kg").is_dir()  # the target is a world still


# -- config ------------------------------------------------------------------------------------------------------
def test_a_config_from_a_pipe_is_read_and_a_terminal_is_refused(tmp_path):
    piped = hqa("--config", "/dev/stdin", "config", "show", "--json", cwd=tmp_path, stdin="[kg]\nlimit = 7\n")
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["kg"]["limit"] == 7
    bad = hqa("--config", "/dev/stdin", "config", "show", cwd=tmp_path, stdin="[kg]\nlimit = 'x'\n")
    one_line(bad, "kg.limit")
    written = hqa("--config", "/dev/stdin", "config", "set", "kg.limit", "9", cwd=tmp_path, stdin="")
    one_line(written, "is not a regular file")
    import pty

    leader, follower = pty.openpty()
    try:
        terminal = hqa("--config", os.ttyname(follower), "config", "show", cwd=tmp_path)
    finally:
        os.close(leader)
        os.close(follower)
    one_line(terminal, "is a terminal")


def test_a_config_from_a_device_or_an_endless_pipe_is_capped_and_one_that_never_ends_times_out(tmp_path,
                                                                                              monkeypatch):
    """``HQA_CONFIG=/dev/zero`` grew to 6.3 GB in 10 s, and ``--config <(endless producer)`` the same: now a config
    is at most 1 MiB, and a pipe that never ends is given up on at its read timeout."""
    from hqa import config as C
    from hqa.errors import ConfigError

    one_line(hqa("config", "show", cwd=tmp_path, env_extra={"HQA_CONFIG": "/dev/zero"}),
             f"config file /dev/zero holds more than {C.MAX_CONFIG_BYTES} bytes")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")} | {"PYTHONPATH": str(REPO)}
    endless = subprocess.run(["bash", "-c", f"{sys.executable} -m hqa.cli --config <(yes '# x') config show"],
                             capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    one_line(endless, f"holds more than {C.MAX_CONFIG_BYTES} bytes")
    broken = one_line(hqa("--config", "/dev/stdin", "config", "show", cwd=tmp_path, stdin="x = [\n"),
                      "is not valid TOML")
    assert "hqa config reset" not in broken and "repair what writes it" in broken  # reset cannot write a pipe
    monkeypatch.setattr(C, "STREAM_TIMEOUT", 0.2)
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    release = threading.Event()

    def writer():  # writes a first line and keeps the pipe open, never ending it
        with open(fifo, "wb") as fh:
            fh.write(b"[kg]\n")
            fh.flush()
            release.wait(60)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        with pytest.raises(ConfigError, match="did not end within 0.2s"):
            C.load_settings(fifo, environ={})
    finally:
        release.set()
        thread.join(60)


# -- artifacts ---------------------------------------------------------------------------------------------------
@pytest.fixture()
def art(tmp_path):
    from hqa.artifacts.store import save_artifact
    from hqa.programs.detllm import DETLLM

    return save_artifact(DETLLM(hops=2), tmp_path / "d", {"program": "detllm", "program_kwargs": {"hops": 2}})


def test_an_edited_manifest_or_a_missing_one_is_refused(art):
    from hqa.artifacts.store import load_program
    from hqa.errors import ArtifactError

    program, _ = load_program(art)
    assert program.hops == 2 and program.k == 5
    manifest = json.loads((art / "manifest.json").read_text())
    # the probe of issue 40: a valid k that program.json does not record (it loaded silently and ran with k = 50)
    (art / "manifest.json").write_text(json.dumps({**manifest, "program_kwargs": {"hops": 2, "k": 50}}))
    with pytest.raises(ArtifactError, match="manifest.json does not match its checksum"):
        load_program(art)
    (art / "manifest.json").unlink()
    with pytest.raises(ArtifactError, match="manifest.json is missing"):
        load_program(art)


def test_an_earlier_manifest_without_its_checksum_must_agree_with_program_json(art):
    from hqa.artifacts.store import load_program
    from hqa.errors import ArtifactError

    manifest = json.loads((art / "manifest.json").read_text())
    manifest.pop("manifest_sha256", None)  # as hqa wrote manifests before they carried one
    (art / "manifest.json").write_text(json.dumps(manifest))
    assert load_program(art)[0].hops == 2
    (art / "manifest.json").write_text(json.dumps({**manifest, "program_kwargs": {"hops": 2, "k": 50}}))
    with pytest.raises(ArtifactError, match="'program_kwargs' differs from what"):
        load_program(art)


# -- Retry-After -------------------------------------------------------------------------------------------------
class Throttled(Counted):
    retry_after = "3600"

    def do_GET(self):
        type(self).hits += 1
        self.reply(429, b"Too many requests", {"Retry-After": type(self).retry_after})


def test_a_retry_after_beyond_the_cap_is_an_outage_at_once_for_the_host(tmp_path):
    from hqa.config import HTTPConfig
    from hqa.retrievers.http import HTTPClient, Unavailable

    sleeps: list[float] = []
    with loopback(Throttled) as base:
        url = f"{base}/w/api.php"
        client = HTTPClient(HTTPConfig(cache_mode="off", max_retries=4, retry_after_cap=60.0), sleep=sleeps.append)
        with pytest.raises(Unavailable, match="Retry-After 3600s, beyond the 60s cap"):
            client.get_json(url, {"q": "1"})
        with pytest.raises(Unavailable, match="treated as down"):
            client.get_json(url, {"q": "2"})
        assert sleeps == [] and Throttled.hits == 1  # no wait, and the second request never reached the host
        Throttled.retry_after = "2"  # within the cap: waited for and retried as before
        polite = HTTPClient(HTTPConfig(cache_mode="off", max_retries=1), sleep=sleeps.append)
        with pytest.raises(Unavailable, match="gave up after 2 attempts"):
            polite.get_json(url, {"q": "3"})
        assert sleeps == [2.0] and Throttled.hits == 3
    Throttled.retry_after = "3600"


# -- the smaller bounds --------------------------------------------------------------------------------------------
class Loop(Counted):
    """Redirects every request to itself."""

    def do_GET(self):
        type(self).hits += 1
        self.reply(302, headers={"Location": self.path})


def test_a_redirect_loop_ends_after_a_few_requests_and_is_not_retried():
    from hqa.config import HTTPConfig
    from hqa.retrievers.http import MAX_REDIRECTS, BadResponse, HTTPClient

    with loopback(Loop) as base:
        client = HTTPClient(HTTPConfig(cache_mode="off", max_retries=4), sleep=lambda s: None)
        with pytest.raises(BadResponse, match="redirected more than"):
            client.get_json(f"{base}/loop")
    assert Loop.hits == MAX_REDIRECTS + 1  # one request and its redirects, once (465 requests before)


def test_threads_below_one_and_batch_questions_past_the_shared_cap_are_refused(tmp_path):
    for command in (["evaluate", "--program", "closedbook"], ["batch", "q.jsonl", "--out", "o"]):
        proc = hqa(*command, "--threads", "0", cwd=tmp_path)
        assert proc.returncode == 2 and "--threads: must be at least 1, got 0" in proc.stderr, proc.stderr
    from hqa.jobs.batch import read_questions
    from hqa.errors import MAX_QUESTION_CHARS, DataError

    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question": "x" * (MAX_QUESTION_CHARS + 1)}) + "\n")
    with pytest.raises(DataError, match="1000"):
        read_questions(path)  # the cap ask and serve apply (batch allowed 4,000)


def test_world_json_gets_the_usual_file_mode_and_list_counts_labelled_entities(dump, tmp_path):
    from hqa.cli.world import labels_part as _labels_part
    from worldkit import build

    old = os.umask(0o022)
    try:
        build(tmp_path / "w", str(dump))
    finally:
        os.umask(old)
    assert (tmp_path / "w" / "world.json").stat().st_mode & 0o777 == 0o644  # was 0600 (mkstemp's)
    assert _labels_part({"entities": 2, "labelled": 0}) == "0 labelled entities (of 2)"
    assert _labels_part({"entities": 5, "labelled": 5}) == "5 labelled entities"
    assert _labels_part({"entities": 1, "labelled": 1}) == "1 labelled entity"
    from hqa.cli.output import counted

    assert (counted(1, "triple"), counted(2044, "triple")) == ("1 triple", "2,044 triples")  # "1 triples" before


def test_broken_pipe_bad_out_folder_and_cache_files_are_one_line(tmp_path):
    env = {"HQA_HTTP__CACHE_PATH": str(tmp_path / "cache.sqlite")}
    big = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")} | {"PYTHONPATH": str(REPO)}
    # the reader closes its end at once (long before the interpreter has started), as `| grep -m1` does once matched
    proc = subprocess.run(f"{sys.executable} -m hqa.cli config show --json | {{ exec 0<&-; sleep 2; }}; "
                          "echo \"status=${PIPESTATUS[0]}\" >&2", shell=True, executable="/bin/bash",
                          capture_output=True, text=True, cwd=tmp_path, env={**big, **env}, timeout=600)
    lines = proc.stderr.strip().splitlines()
    assert lines == ["hqa: output stopped: the command reading it exited (broken pipe)", "status=141"], proc.stderr
    out = hqa("evaluate", "--program", "closedbook", "--dataset", "compmix/dev", "--limit", "1", "--out",
              "/proc/x", cwd=tmp_path)
    one_line(out, "cannot use /proc/x")
    export = tmp_path / "export.jsonl"
    export.write_bytes(b"\xff\xfe\n")
    one_line(hqa("cache", "import", str(export), cwd=tmp_path, env_extra=env), "export.jsonl:1: not UTF-8")
    (tmp_path / "cache.sqlite").write_bytes(b"not a database " * 100)
    for action in (["stats"], ["import", str(export)]):
        one_line(hqa("cache", *action, cwd=tmp_path, env_extra=env), "cache.sqlite is corrupt")
    # a device as the export: it said "cache export /dev/zero does not exist"
    one_line(hqa("cache", "import", "/dev/zero", cwd=tmp_path, env_extra=env),
             "cache export /dev/zero is not a regular file")


def test_an_interrupt_right_after_the_label_commit_stays_an_interrupt(tmp_path, monkeypatch):
    """Ctrl-C landing once COMMIT is done: the ROLLBACK that follows has no transaction, and its OperationalError
    used to replace the KeyboardInterrupt (``unexpected OperationalError``, exit 1 instead of 130)."""
    from hqa.world.label_store import LabelStoreWriter

    writer = LabelStoreWriter(tmp_path / "labels.sqlite")
    real = writer.db

    class CtrlCAfterCommit:
        in_transaction = property(lambda self: real.in_transaction)

        def execute(self, sql, *args):
            out = real.execute(sql, *args)
            if sql == "COMMIT":
                raise KeyboardInterrupt
            return out

        def executemany(self, sql, rows):
            return real.executemany(sql, rows)

    writer.db = CtrlCAfterCommit()
    with pytest.raises(KeyboardInterrupt):
        writer.commit_chunk([("Q1", "label", "one")], {"Q1": 1}, (0, "{}"))
    writer.db = real
    assert writer.progress() == {0: "{}"}  # the chunk and its checkpoint were committed together
    writer.close()

    import hqa.cli.entry as cli
    import hqa.cli.world

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(hqa.cli.world, "run", interrupted)
    assert cli.main(["world", "list"]) == 130


def test_world_build_errors_escape_the_control_bytes_of_the_dump(tmp_path):
    bad = tmp_path / "bad.nt"
    bad.write_bytes(b"<http://www.wikidata.org/entity/Q1> \x1b[2J\x1b]0;pwned\x07 broken .\n")
    proc = hqa("world", "build", "w", "--out", str(tmp_path / "w"), "--wikidata", str(bad), "--quiet", cwd=tmp_path)
    line = one_line(proc, "bad.nt")
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr
    assert "\\x1b" in line


@pytest.mark.real_lm
def test_the_embedded_lm_stops_a_cancelled_prompt_between_batches_and_a_cancelled_generation_between_tokens():
    """The issue's 400-emoji question kept the embedded SmolLM2 busy ~36 s after its 504; a cancelled request's
    prompt stops before its next batch and its generation before its next token, and the model then answers the
    next request as usual."""
    import threading as th

    from hqa.io.cancel import Cancelled, cancelled_by
    from hqa.lm.models import LlamaCppEngine

    engine = LlamaCppEngine(n_ctx=2048)
    llama = engine._model()
    prompt = llama.tokenize(("\U0001f600 " * 400).encode())  # the emoji question: several prompt batches
    assert len(prompt) > llama.n_batch
    stop = th.Event()
    with cancelled_by(stop):
        stop.set()
        llama.n_tokens = 0
        with pytest.raises(Cancelled):
            llama.eval(prompt)
        assert llama.n_tokens == 0  # not one batch decoded
        stop.clear()
        tokens = llama.generate(llama.tokenize(b"Count: one, two, three,"), temp=0.0)
        next(tokens)
        stop.set()
        with pytest.raises(Cancelled):
            next(tokens)
    from dspy.lm15 import Message, Request

    answer = engine.complete(Request(model="smollm2", messages=(Message.user("Say hi."),)))
    assert answer.message.text  # the same model answers the next request
    engine.close()



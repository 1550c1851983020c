"""``hqa serve``: the FastAPI app with DummyLM (TestClient), and one real uvicorn process on 127.0.0.1 with the
embedded LM, checked over HTTP and in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import dspy
import httpx
import pytest
from dspy.utils import DummyLM
from fastapi.testclient import TestClient
from prockit import _chromium

from hqa.app import OpenedProgram
from hqa.serve import check_bind, create_app
from standins.servers import free_port, wait_port

REPO = Path(__file__).resolve().parent.parent.parent
Q = "Who is the author of Animal Farm?"


def test_lm_server_down_is_503_with_reason():
    """A real LM client pointed at a loopback port nobody listens on: 503 naming the LM, server stays up."""
    from hqa.programs.closedbook import ClosedBook

    lm = dspy.LM("openai/dead", api_base=f"http://127.0.0.1:{free_port()}/v1", api_key="x", num_retries=0,
                 cache=False, timeout=5)
    dspy.configure(lm=lm, adapter=dspy.ChatAdapter())
    try:
        app = create_app(OpenedProgram(ClosedBook(), label="closedbook", kind="closedbook", source="program"))
        with TestClient(app) as client:
            r = client.post("/v1/ask", json={"question": Q})
            health = client.get("/healthz")
    finally:
        dspy.configure(lm=None)
    assert r.status_code == 503, r.text
    assert r.json()["error"].startswith("the LM failed") and "\n" not in r.json()["error"]
    assert health.status_code == 200 and health.json()["failed"] == 1


HANGING_LM = r"""
import http.server, json, sys, time
from pathlib import Path
marker = Path(sys.argv[2])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "smollm2", "object": "model"}]}).encode()
        self.send_response(200); self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        marker.write_text("in flight")
        time.sleep(600)  # an LM server busy decoding, until it is killed
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_lm_server_killed_mid_request_is_503_and_server_stays_up(tmp_path):
    """The LM server process dies while a question is in flight: that request gets 503 naming the LM failure,
    /healthz stays 200, and the next request is answered once an LM is back."""
    from hqa.programs.closedbook import ClosedBook

    port, marker = free_port(), tmp_path / "arrived"
    lm_proc = subprocess.Popen([sys.executable, "-c", HANGING_LM, str(port), str(marker)])
    try:
        wait_port(port, lm_proc, seconds=30)
        lm = dspy.LM("openai/smollm2", api_base=f"http://127.0.0.1:{port}/v1", api_key="x", num_retries=0,
                     cache=False, timeout=120)
        dspy.configure(lm=lm, adapter=dspy.ChatAdapter())
        app = create_app(OpenedProgram(ClosedBook(), label="closedbook", kind="closedbook", source="program"))
        with TestClient(app) as client:
            result = {}
            t = threading.Thread(target=lambda: result.update(r=client.post("/v1/ask", json={"question": Q})))
            t.start()
            deadline = time.monotonic() + 60
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert marker.exists(), "the request never reached the LM server"
            lm_proc.kill()  # SIGKILL mid-request
            t.join(120)
            health = client.get("/healthz")
            dspy.configure(lm=DummyLM([{"answer": "George Orwell"}]), adapter=dspy.ChatAdapter())
            after = client.post("/v1/ask", json={"question": Q})
    finally:
        lm_proc.kill()
        lm_proc.wait(10)
        dspy.configure(lm=None)
    r = result["r"]
    assert r.status_code == 503, r.text
    assert r.json()["error"].startswith("the LM failed") and "\n" not in r.json()["error"]
    assert health.status_code == 200 and health.json()["failed"] == 1
    assert after.status_code == 200 and after.json()["answer"] == "George Orwell"


def test_bind_beyond_loopback_needs_a_key():
    check_bind("127.0.0.1", None)
    check_bind("::1", None)
    check_bind("localhost", None)
    check_bind("0.0.0.0", "k")
    for host in ("0.0.0.0", "192.168.1.5", "::"):
        with pytest.raises(Exception, match="API key"):
            check_bind(host, None)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("HQA_API_KEY", None)
    out = subprocess.run([sys.executable, "-m", "hqa.cli", "serve", "--program", "closedbook", "--host", "0.0.0.0"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "API key" in out.stderr


def test_corrupt_artifact_refuses_to_start(tmp_path):
    art = tmp_path / "broken"
    art.mkdir()
    (art / "program.json").write_text("{}")
    (art / "manifest.json").write_text("{not json")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "hqa.cli", "serve", "--load", str(art), "--port", str(free_port())],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("hqa: error:") and "corrupt" in out.stderr
    assert out.stderr.count("\n") == 1


# -- one real server ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_server(built_pack, tmp_path_factory):
    """`hqa serve` (the shipped compiled default program) on 127.0.0.1 with the embedded SmolLM2 and the session's
    pack."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "stderr.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HQA_PATHS__ARTIFACTS": str(built_pack), "HQA_LM__MAX_TOKENS": "48"}
    env.pop("HQA_API_KEY", None)
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "hqa.cli", "serve", "--port", str(port)],
                                stdout=fh, stderr=fh, env=env)
    try:
        wait_port(port, proc, seconds=300)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            status = httpx.get(base + "/healthz", timeout=10)
            if status.status_code == 200 or status.json().get("status") == "failed":
                break
            time.sleep(0.5)
        assert status.status_code == 200, status.text
        yield base, proc, log
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.server
@pytest.mark.real_lm
def test_real_server_answers_over_http(real_server):
    base, proc, log = real_server
    r = httpx.post(base + "/v1/ask", json={"question": Q}, timeout=300)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["answer"].strip() and body["trace"]["evidence"]
    bad = httpx.post(base + "/v1/ask", content=b"\xff\xfe", headers={"content-type": "application/json"}, timeout=30)
    assert bad.status_code == 422 and proc.poll() is None
    logged = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert {(x["path"], x["status"]) for x in logged} >= {("/v1/ask", 200), ("/v1/ask", 422)}


@pytest.mark.server
@pytest.mark.real_lm
def test_web_page_in_headless_chromium(real_server, tmp_path):
    """The page over the shipped default program: the steps streamed while answering, the demos its prompts held
    (as many per predictor as the compiled program has), the ranked candidates with their support, SPARQL rows as
    labels, one provenance format, and no numbered list item standing for an empty section.  A screenshot is left
    in /tmp/hqa-page.png to look at."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    from hqa.app import default_program_dir

    found = _chromium()
    assert found, "Debian chromium and chromium-driver are required (scripts/setup installs them)"
    shipped = json.loads((default_program_dir() / "program.json").read_text())
    shipped_demos = {name: len(state.get("demos") or []) for name, state in shipped.items()
                     if isinstance(state, dict) and "demos" in state}
    base, _proc, _log = real_server
    opts = webdriver.ChromeOptions()
    opts.binary_location = found[0]
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,2400"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(found[1]), options=opts)
    try:
        driver.get(base + "/")
        WebDriverWait(driver, 30).until(EC.text_to_be_present_in_element((By.ID, "status"), "ready"))
        driver.find_element(By.ID, "question").send_keys(Q)
        driver.find_element(By.ID, "submit").click()
        WebDriverWait(driver, 300).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#live li"))
        WebDriverWait(driver, 300).until(EC.visibility_of_element_located((By.ID, "answer")))
        WebDriverWait(driver, 300).until(lambda d: d.find_element(By.ID, "answer").text.strip())
        live = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#live li")]
        items = driver.find_elements(By.CSS_SELECTOR, "#evidence li.evidence")
        tags = {i.find_element(By.CSS_SELECTOR, ".tag").text for i in items}
        item_texts = [i.text for i in items]
        sources = driver.find_element(By.ID, "sources").text
        cells = [td.text for td in driver.find_elements(By.CSS_SELECTOR, "#sparql td")]
        candidates = driver.find_elements(By.CSS_SELECTOR, "#candidates li")
        cand_prov = [c.find_element(By.CSS_SELECTOR, ".prov").text for c in candidates]
        demo_sets = [s.get_attribute("textContent") for s in driver.find_elements(By.CSS_SELECTOR, "#demos summary")]
        numbered = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#result ol > li")]
        usage = driver.find_element(By.ID, "usage").text
        driver.save_screenshot("/tmp/hqa-page.png")
    finally:
        driver.quit()
    assert live[0] == "default: answering…"  # streamed before the answer (a question may need no LM call)
    assert live[-1].startswith("answered: ")
    assert all(": running…" not in text for text in live)  # every streamed predictor step was completed
    assert items and tags <= {"text", "triples", "sparql"} and tags
    assert "final: " in sources
    assert not any("wikidata.org" in text for text in item_texts)  # provenance as "label (Qid)", one format
    assert cells and not any("wikidata.org/entity/" in c for c in cells)
    assert any(re.fullmatch(r".+ \([PQ]\d+\)", c) for c in cells)  # a labelled id: "label (Q…)"
    assert candidates and all(p.startswith("← ") and "support: " in p for p in cand_prov)
    assert demo_sets, "no demos shown for the shipped default program"
    assert len(demo_sets) == sum(1 for n in shipped_demos.values() if n)
    for text in demo_sets:  # "<predictor>: N demos — …", N as compiled
        name, _, count = text.partition(": ")
        assert int(count.split()[0]) == shipped_demos[name] == 4, (text, shipped_demos)
    assert not any(text.startswith("no ") for text in numbered)
    assert usage.startswith("usage: ") and " LM calls" in usage
    assert Path("/tmp/hqa-page.png").stat().st_size > 1000

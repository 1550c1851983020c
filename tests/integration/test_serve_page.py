"""The web page in headless Chromium over the HQA agent (scripted LM, the session pack's KG): the agent's steps
appear on the page while the question is still being answered (the LM is held until the page shows the first
step), then the answer with labelled SPARQL rows, the demos the prompts held, and unnumbered empty sections.
A screenshot is left in /tmp/hqa-page-agent.png."""

from __future__ import annotations

import dspy
import pytest
from lmkit import BlockingLM
from prockit import AGENT_SCRIPT, _chromium, agent_app, serving


Q = "What is the capital of Gabon?"


def submit(driver, port: int, question: str) -> None:
    """Open the page, wait until the server is ready, ask ``question``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"http://127.0.0.1:{port}/")
    WebDriverWait(driver, 30).until(EC.text_to_be_present_in_element((By.ID, "status"), "ready"))
    driver.find_element(By.ID, "question").send_keys(question)
    driver.find_element(By.ID, "submit").click()


@pytest.mark.server
def test_page_shows_agent_steps_live(settings_for, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    found = _chromium()
    assert found, "Debian chromium and chromium-driver are required (scripts/setup installs them)"
    lm = BlockingLM(list(AGENT_SCRIPT))
    agent, app = agent_app(settings_for, lm)
    agent.react.demos = [dspy.Example(question="Capital of Chad?", trajectory="", next_thought="done",
                                      next_tool_name="Finish", next_tool_args="N'Djamena",
                                      demo_id="chad-1").with_inputs("question", "trajectory")]
    opts = webdriver.ChromeOptions()
    opts.binary_location = found[0]
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,2000"):
        opts.add_argument(flag)
    try:
        with serving(app) as port:
            driver = webdriver.Chrome(service=Service(found[1]), options=opts)
            try:
                submit(driver, port, Q)
                WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#live li.step"))
                first = driver.find_element(By.CSS_SELECTOR, "#live li.step").text
                status_while = driver.find_element(By.ID, "status").text
                result_hidden = driver.find_element(By.ID, "result").get_attribute("hidden")
                lm.release.set()
                WebDriverWait(driver, 60).until(lambda d: d.find_element(By.ID, "answer").text.strip())
                live = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#live li")]
                cells = [td.text for td in driver.find_elements(By.CSS_SELECTOR, "#sparql td")]
                demo_sets = [x.get_attribute("textContent") for x in driver.find_elements(By.CSS_SELECTOR,
                                                                                           "#demos summary")]
                numbered = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#result ol > li")]
                empties = [x.text for x in driver.find_elements(By.CSS_SELECTOR, "#result p.empty")]
                answer = driver.find_element(By.ID, "answer").text
                driver.save_screenshot("/tmp/hqa-page-agent.png")
            finally:
                driver.quit()
    finally:
        lm.release.set()
        dspy.configure(lm=None)
    assert first == "react: Find the QID of Gabon → GetWikidataID(Gabon)"
    assert status_while == "answering…" and result_hidden == "true"  # shown before the answer existed
    assert live[0] == "humaniq: answering…" and len([t for t in live if t.startswith("react: ")]) == 4
    assert answer == "Libreville"
    assert cells == ["Libreville (Q3825)"]
    assert demo_sets == ["react: 1 demo — in this question's prompts"]
    assert "no ranked candidates (the LM wrote the answer)" in empties  # an empty section is a plain line
    assert not any(text.startswith("no ") for text in numbered)


@pytest.mark.server
def test_page_shows_no_answer_with_the_reason_and_candidates(tmp_path):
    """An abstention reads "No answer" on the page, with the reason and the ranked candidates; the status says so."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    from hqa.app import OpenedProgram
    from hqa.serve import create_app
    from prockit import _abstaining

    found = _chromium()
    assert found, "Debian chromium and chromium-driver are required (scripts/setup installs them)"
    app = create_app(OpenedProgram(_abstaining, label="abst", kind="simple", source="program"))
    opts = webdriver.ChromeOptions()
    opts.binary_location = found[0]
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(flag)
    with serving(app) as port:
        driver = webdriver.Chrome(service=Service(found[1]), options=opts)
        try:
            submit(driver, port, "Who directed it?")
            WebDriverWait(driver, 60).until(lambda d: d.find_element(By.ID, "answer").text.strip())
            answer = driver.find_element(By.ID, "answer").text
            reason = driver.find_element(By.ID, "reason").text
            status = driver.find_element(By.ID, "status").text
            candidates = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#candidates li")]
        finally:
            driver.quit()
    assert answer == "No answer" and status == "no answer"
    assert reason == "reason: confidence 0.10 is below the calibrated threshold 0.66"
    assert len(candidates) == 1 and "Knoxville" in candidates[0] and "place of birth" in candidates[0]


@pytest.mark.server
def test_page_and_answer_flag_a_fallback_with_the_step_that_failed(settings_for, tmp_path):
    """The agent's first step cannot be parsed (a reply without its fields, twice: the chat format and the JSON
    retry), so its answer comes from the final step without the tools' answers: the JSON answer's ``fallback`` names
    the step and where the answer came from, the page says so beside the answer and in its status line."""
    from lmkit import UsageLM
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    from hqa.lm.adapters import StrictChatAdapter

    found = _chromium()
    assert found, "Debian chromium and chromium-driver are required (scripts/setup installs them)"
    broken = {"no_such_field": "cut off"}  # no output field of the step: unparsable as chat and as JSON
    lm = UsageLM([broken, broken, {"answer": "Libreville"}, {"answer": "Libreville"}, {"answer": "Libreville"}])
    _agent, app = agent_app(settings_for, lm)
    dspy.configure(adapter=StrictChatAdapter())
    opts = webdriver.ChromeOptions()
    opts.binary_location = found[0]
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(flag)
    try:
        with serving(app) as port:
            import httpx

            body = httpx.post(f"http://127.0.0.1:{port}/v1/ask", json={"question": Q}, timeout=60).json()
            lm_again = UsageLM([broken, broken, {"answer": "Libreville"}, {"answer": "Libreville"},
                                {"answer": "Libreville"}])
            dspy.configure(lm=lm_again)
            driver = webdriver.Chrome(service=Service(found[1]), options=opts)
            try:
                submit(driver, port, Q)
                WebDriverWait(driver, 60).until(lambda d: d.find_element(By.ID, "answer").text.strip())
                answer = driver.find_element(By.ID, "answer").text
                flagged = driver.find_element(By.ID, "fallback").text
                status = driver.find_element(By.ID, "status").text
                usage = driver.find_element(By.ID, "usage").text
            finally:
                driver.quit()
    finally:
        dspy.configure(lm=None)
    assert body["answer"] == "Libreville" and body["fallback"]["step"] == "react", body.get("fallback")
    assert body["fallback"]["kind"] in ("memory", "sources") and body["usage"]["parse_failures"] == 2
    assert body["usage"]["retries"] == 1
    assert answer == "Libreville" and flagged.startswith(f"fallback: {body['fallback']['kind']} — react failed")
    assert status == f"answered (fallback: {body['fallback']['kind']})"
    assert "2 unparsable replies, 1 retries" in usage

"""Shared fixtures: a knowledge pack built once per session from the real recorded data, into a temp dir."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# traces are written as each question ends, not by background workers that keep retrying a tracking server a test
# has already stopped (a later test's set_tracking_uri then waits for them)
os.environ.setdefault("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")

REPO = Path(__file__).resolve().parent.parent
# The data the tests read comes into the data directory (paths.data) from this project's mirror, ../shared/data, as it
# does for `make test` and .ci/run; the package itself never looks there (hqa/data/store.py).
if (REPO.parent / "shared" / "data").is_dir():
    os.environ.setdefault("HQA_DATA_MIRROR", str(REPO.parent / "shared" / "data"))

# Skips the suite intends; any other skip fails the run (a skip must never hide a code path).  Keys are node-id
# prefixes, values say why.  Every dependency a test needs is installed by scripts/setup, so none is listed.
ALLOWED_SKIPS: dict[str, str] = {}  # node-id prefix -> why that skip is intended; none today


def _unexpected_skip(report) -> str | None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return None
    if any(report.nodeid.startswith(prefix) for prefix in ALLOWED_SKIPS):
        return None
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return f"unexpected skip (not in tests/conftest.py ALLOWED_SKIPS): {reason}"


def _fail_unexpected_skip(report) -> None:
    message = _unexpected_skip(report)
    if message:
        report.outcome = "failed"
        report.longrepr = message


def pytest_sessionstart(session):
    """Every dataset the mirror holds is pulled into the data directory before any test runs, so the tests that run
    hqa in a subprocess with a clean environment (no HQA_* variables, hence no mirror) find it there."""
    mirror = os.environ.get("HQA_DATA_MIRROR")
    if not mirror or "://" in mirror:
        return
    from hqa.data import store

    names = [d.name for d in store.datasets().values() if all((Path(mirror) / f.file).is_file() for f in d.files)]
    try:
        store.pull(names, progress=False, report=lambda _line: None)
    except store.DataError as exc:
        pytest.exit(f"the mirror {mirror} does not fill the data directory: {exc}", returncode=1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_unexpected_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_unexpected_skip(outcome.get_result())


@pytest.fixture(scope="session")
def built_pack(tmp_path_factory) -> Path:
    """A real pack (artifacts layout) built from the recorded sources (pulled into the data directory) into a session
    temp dir."""
    from hqa.world.pack import build_pack

    artifacts = tmp_path_factory.mktemp("artifacts")
    build_pack(artifacts / "pack", leads=None)  # the recorded sources: embedding 10k leads takes minutes a session
    return artifacts


@pytest.fixture()
def settings_for(built_pack):
    """Settings pointing at the session pack; keyword overrides as ``section_key=value``."""
    from hqa.config import load_settings

    def make(**overrides):
        return load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(built_pack), **overrides)

    return make


# -- shared fakes ----------------------------------------------------------------------------------------------------
import hashlib  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402

from dspy.utils import DummyLM  # noqa: E402

_OUTPUT_FIELDS = re.compile(r"Your output fields are:\n(.*?)(?:\n\n|\Z)", re.S)
_FIELD_NAME = re.compile(r"^\d+\. `(\w+)`", re.M)
_PROPOSED = re.compile(r"\bd[0-9a-f]{12}\b")  # an instruction this LM proposed (MIPROv2, GEPA)


class DemoSensitiveLM(DummyLM):
    """A DummyLM whose replies depend on everything it has been shown: instructions, demos, inputs.

    Every output field gets ``d<digest>``, where the digest chains the full prompt of this call onto the digest of
    the previous call (reset with :meth:`reset`; ``chain=False`` digests each prompt alone).  A program that lost one demo or one instruction therefore
    answers differently from the one it was saved from.  ``fixed`` gives values for fields that must parse (a tool
    name, a triple chain); ``{d}`` in a fixed value is replaced by the digest, so those stay demo-sensitive too.
    ``known`` maps question texts to the ``answer`` given whenever that question is the one asked (train questions
    a bootstrap should succeed on); ``known_with_demos`` likewise, but only when the prompt shows at least one demo
    or an instruction this LM proposed (so a search over candidate programs prefers an optimized one).  ``prompts`` records the digest of each prompt.
    """

    def __init__(self, fixed: dict[str, str] | None = None, chain: bool = True, known: dict[str, str] | None = None,
                 known_with_demos: dict[str, str] | None = None):
        super().__init__([])
        self.fixed = dict(fixed or {})
        self.known = dict(known or {})
        self.known_with_demos = dict(known_with_demos or {})
        self.chain = chain
        self.reset()
        self._engine_spec = _DemoEngine(self)
        from dspy.clients.engines.dummy_engine import AsyncDummyEngine

        self._async_engine_spec = AsyncDummyEngine(self._engine_spec)

    def reset(self) -> None:
        self.digest = "0"
        self.prompts: list[str] = []

    def copy(self, **kwargs):
        copied = super().copy(**kwargs)
        copied._engine_spec = _DemoEngine(copied)
        from dspy.clients.engines.dummy_engine import AsyncDummyEngine

        copied._async_engine_spec = AsyncDummyEngine(copied._engine_spec)
        return copied

    def reply(self, messages: list[dict]) -> str:
        prompt = json.dumps([[m.get("role"), m.get("content")] for m in messages], sort_keys=True)
        self.prompts.append(hashlib.sha256(prompt.encode()).hexdigest()[:12])
        self.digest = hashlib.sha256(((self.digest if self.chain else "") + prompt).encode()).hexdigest()[:12]
        system = next((m["content"] for m in messages if m.get("role") == "system"), "")
        block = _OUTPUT_FIELDS.search(system)
        names = _FIELD_NAME.findall(block.group(1)) if block else ["answer"]
        d = "d" + self.digest
        values = {n: self.fixed[n].replace("{d}", d) if n in self.fixed else d for n in names}
        asked = messages[-1].get("content") or ""
        known = next((a for q, a in self.known.items() if q in asked), None)
        shown = any(m.get("role") == "assistant" for m in messages[:-1]) or bool(_PROPOSED.search(system))
        if known is None and shown:
            known = next((a for q, a in self.known_with_demos.items() if q in asked), None)
        if known is not None and "answer" in values:
            values["answer"] = known
        if "Outputs will be a JSON object" in system:  # JSONAdapter's prompt (GEPA's reflection uses it)
            return json.dumps(values)
        return self._format_answer_fields(values)


class _DemoEngine:
    def __init__(self, owner: DemoSensitiveLM):
        from dspy.clients.engines.dummy_engine import DummyEngine

        self.owner = owner
        self._base = DummyEngine(owner)
        self._base._complete_messages = self._complete_messages

    def _complete_messages(self, messages):
        from dspy.lm15 import Message, Response, TextPart, Usage

        return Response(id=None, model="dummy", message=Message.assistant([TextPart(self.owner.reply(messages))]),
                        finish_reason="stop", usage=Usage(input_tokens=0, output_tokens=0, total_tokens=0))

    def __getattr__(self, name):
        return getattr(self._base, name)


# replies that let every program run to its end under DemoSensitiveLM
AGENT_FINISH = {"next_tool_name": "Finish", "next_tool_args": "Wikipedia_Answer: {d}, Wikidata_Answer: [{d}]",
                "chain": "(Gabon, capital, #1)"}


def predictor_states(program) -> dict[str, dict]:
    """Per named predictor (of the student, for a DPP-wrapped program): its instructions and its demos, every field
    as plain JSON values."""
    inner = getattr(program, "program", program)

    def plain(demo):
        return json.loads(json.dumps(demo.toDict() if hasattr(demo, "toDict") else dict(demo), sort_keys=True,
                                     default=str))

    return {name: {"instructions": p.signature.instructions, "demos": [plain(d) for d in p.demos]}
            for name, p in inner.named_predictors()}


def fake_dense(query, k=5):
    """Dense retrieval stand-in: one passage about the query (the pack's KG and linker stay real)."""
    from hqa.retrievers.base import Evidence

    return [Evidence(text=f"text about {query[:40]}", source="text", score=0.9,
                     meta={"id": "p1", "title": "Gabon"})][:k]


def fake_bm25(query, k=5):
    """BM25-over-triples stand-in: one linearized triple."""
    from hqa.retrievers.base import Evidence

    return [Evidence(text="Gabon capital Libreville", source="triples", score=0.5,
                     meta={"s": "Q1000", "p": "P36", "o": "Q3825"})][:k]


class KeepOrderReranker:
    """Reranker stand-in: keeps the pool's order; records the queries."""

    kind = "test"

    def __init__(self):
        self.queries: list[str] = []

    def rerank(self, query, items, k=None):
        self.queries.append(query)
        return list(items)[:k]


class ScriptedSparql:
    """SPARQL backend stand-in: the rows of the first pattern (a substring) the query contains, an error result for a
    query containing ``BROKEN``, an exception for ``RAISE``, no rows otherwise; records every query."""

    name = "fake"

    def __init__(self, responses: dict[str, list[dict]] | None = None, labels: dict[str, str] | None = None):
        self.responses = dict(responses or {})
        self.label_map = dict(labels or {})
        self.queries: list[str] = []

    def run(self, query: str):
        from hqa.retrievers.base import SparqlResult

        self.queries.append(query)
        if "RAISE" in query:
            raise RuntimeError("backend exploded")
        if "BROKEN" in query:
            return SparqlResult(query=query, error="QueryRejected: malformed SPARQL")
        for pattern, rows in self.responses.items():
            if pattern in query:
                return SparqlResult(query=query, rows=rows, variables=sorted({v for row in rows for v in row}))
        return SparqlResult(query=query, rows=[], variables=[])

    def labels(self, ids):
        return {i: self.label_map[i] for i in ids if i in self.label_map}


class ScriptedLinker:
    """Entity-linker stand-in: a case-insensitive exact label match among fixed entities (QID -> label); records
    every (mention, question)."""

    def __init__(self, entities: dict[str, str]):
        self.entities = dict(entities)
        self.calls: list[tuple[str, str | None]] = []

    def link(self, mention, question=None, k=5):
        from hqa.retrievers.linking.entities import Candidate

        self.calls.append((mention, question))
        wanted = (mention or "").strip().lower()
        return [Candidate(q, label, "", 1.0, mention) for q, label in self.entities.items()
                if label.lower() == wanted][:k]

    def labels(self, ids):
        return {i: self.entities[i] for i in ids if i in self.entities}

    def title_to_qid(self, title):
        """A page title's QID (GetWikidataID): the entity whose label it is."""
        found = self.link(title, k=2)
        return found[0].id if len(found) == 1 else None


@pytest.fixture()
def pack_toolbox(settings_for):
    """The session pack's SPARQL store and entity linker, with in-process text retrieval and reranking.

    Answers are free text (``programs.answer_mode = free``): the fake LMs used with it reply with strings that are
    not evidence candidates, and grounded choice has its own tests (tests/integration/test_grounded.py)."""
    from hqa.toolbox import Toolbox

    return Toolbox(settings_for(programs_answer_mode="free"), dense=fake_dense, bm25=fake_bm25,
                   reranker=KeepOrderReranker())


@pytest.fixture(autouse=True)
def _restore_global_dspy_settings():
    """A test that runs the CLI in-process configures DSPy globally (hqa.app.configure_dspy); put the LM and adapter
    back so the next test sees what it would see alone."""
    import dspy

    before = (dspy.settings.lm, dspy.settings.adapter)
    yield
    if (dspy.settings.lm, dspy.settings.adapter) != before:
        dspy.configure(lm=before[0], adapter=before[1])


@pytest.fixture(autouse=True)
def _no_tracing_after_the_test():
    """A test that turns tracing on (``--trace``, ``tracking.traces``) leaves DSPy autologging and hqa's trace tags
    installed in the process; take them out so the next test's DSPy calls are not traced into a store (or a loopback
    MLflow server) that is gone."""
    import sys

    yield
    mlflow = sys.modules.get("mlflow")
    if mlflow is None:
        return
    import dspy

    callbacks = list(dspy.settings.get("callbacks") or [])
    keep = [c for c in callbacks if not type(c).__module__.startswith("mlflow") and type(c).__name__ != "TraceTags"]
    if len(keep) != len(callbacks):
        mlflow.dspy.autolog(disable=True)
        dspy.settings.configure(callbacks=keep)


def default_sigint() -> None:
    """``preexec_fn`` for a child a test sends Ctrl-C to: SIGINT back to its default disposition. A test run started
    in the background of a non-interactive shell ignores SIGINT, and children inherit that; Python then never raises
    KeyboardInterrupt, as a user's foreground ``hqa`` would."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """One MLflow tracking server (sqlite store, local artifact root) on a free loopback port, shared by the tests that
    need a real tracking server (each keeps to its own run and model names): one start-up costs tens of seconds on
    this machine.  Yields (tracking URI, its folder); stopped with its process group at the end of the session."""
    import sys

    from prockit import start
    from standins.servers import free_port, stop, wait_http, wait_port

    tmp = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    proc = start([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{tmp / 'mlflow.db'}",
                  "--default-artifact-root", (tmp / "mlartifacts").as_uri(), "--host", "127.0.0.1", "--port",
                  str(port), "--workers", "1"])
    try:
        wait_port(port, proc, seconds=180)
        uri = f"http://127.0.0.1:{port}"
        wait_http(uri + "/health", proc, seconds=60)
        yield uri, tmp
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def entity_lm():
    """The loopback LM stand-in (standins/openai_lm.py) answering each question with its own entity (its last
    capitalised word), so answers differ from question to question and a mix-up between questions shows; 50 ms a
    call; one per test module."""
    from standins.openai_lm import SCRIPTS, Behaviour, start

    running = start(Behaviour(latency=0.05, script={**SCRIPTS["default"], "answer": "{entity}"}))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def pack_sparql(built_pack):
    """``oxigraph serve-read-only`` over the session pack's KG on 127.0.0.1: its SPARQL query URL (one endpoint that
    several processes share, as a cluster's workers do)."""
    from standins.servers import start_oxigraph, stop

    proc, url = start_oxigraph(built_pack / "pack" / "kg")
    try:
        yield url
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray of 2 CPUs for the session's tests (its start-up takes seconds here), started by the first test
    that asks for it and stopped at the end; the engine under test connects to it instead of starting its own (a
    test's settings reach the workers inside each question's ProgramSpec, not through the environment)."""
    import logging

    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def spark():
    """One Spark session in local mode (``local[2]``) for the session's tests, started on first use (~15-20 s here)
    and stopped at the end; its Python workers run this interpreter (``PYSPARK_PYTHON``: the venv's, which has hqa's
    dependencies)."""
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("hqa-tests").config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


ENTITIES = [
    {"id": "Q23001951", "label": "Riverdale (American TV series)", "description": ""},
    {"id": "Q15228", "label": "The Lord of the Rings", "description": "1954–1955 fantasy novel by J. R. R. Tolkien"},
    {"id": "Q50602", "label": "Manchester City F.C.", "description": ""},
    {"id": "Q142794", "label": "Neymar", "description": "Brazilian footballer"},
    {"id": "Q177220", "label": "singer", "description": "person who sings"},
    {"id": "Q215380", "label": "band", "description": "musical ensemble"},
    {"id": "Q184827", "label": "Tool", "description": "American rock band"},
    {"id": "Q167726", "label": "Jurassic Park", "description": "1993 film directed by Steven Spielberg"},
    {"id": "Q756866", "label": "Jurassic Park", "description": "1990 science fiction novel by Michael Crichton"},
    {"id": "Q2336369", "label": "Jurassic Park", "description": "American science fiction media franchise"},
    {"id": "Q212804", "label": "The Ring", "description": "", "degree": 0},
    {"id": "Q3202038", "label": "The Ring", "description": "", "degree": 7},
    {"id": "Q571", "label": "book", "description": "written work"},
    {"id": "Q30", "label": "Rings", "description": "2017 film"},
    {"id": "Q7", "label": "Gabon", "description": "country in Africa"},
]


@pytest.fixture()
def services(built_pack, tmp_path):
    """The live stand-ins over the session pack: MediaWiki and Wikibase APIs (standins.live) and a real ``oxigraph
    serve-read-only`` behind them; yields their endpoints and ``stop`` (the test may stop them early)."""
    import shutil

    from standins.live import serve
    from standins.servers import start_oxigraph

    store = tmp_path / "kg"
    shutil.copytree(built_pack / "pack" / "kg", store)
    oxigraph, sparql_url = start_oxigraph(store)
    server, base = serve(built_pack / "pack", sparql_url)
    state = {"up": True}

    def stop():
        if state["up"]:
            server.shutdown()
            server.server_close()
            oxigraph.kill()
            oxigraph.wait(timeout=10)
            state["up"] = False

    yield {"wiki": base + "/w/api.php", "wikidata": base + "/wikidata/api.php", "sparql": base + "/sparql",
           "stop": stop}
    stop()


@pytest.fixture(scope="module")
def lm_server():
    """The loopback OpenAI-compatible LM stand-in (standins/openai_lm.py), one per test module."""
    from standins.openai_lm import Behaviour, PrefixCache, start

    running = start(Behaviour(latency=0.0), PrefixCache(minimum=40, step=8))
    yield running
    running.stop()


@pytest.fixture()
def server(lm_server):
    from standins.openai_lm import Behaviour

    lm_server.state.reset()
    lm_server.state.behaviour = Behaviour(latency=0.0)
    yield lm_server


@pytest.fixture()
def cli(built_pack, tmp_path, monkeypatch):
    """Run ``hqa`` in-process in a fresh artifacts folder (the session pack linked in); returns (code, out, err)."""
    import dspy

    import hqa.app
    from hqa.cli.entry import main
    from hqa.data.datasets import load_examples

    art = tmp_path / "artifacts"
    art.mkdir()
    (art / "pack").symlink_to(built_pack / "pack")
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith("HQA_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HQA_PATHS__ARTIFACTS", str(art))
    train = {ex.question: ex.answers[0] for ex in load_examples("compmix/dev", 4)}
    lm = DemoSensitiveLM(chain=False, known=train)

    def fake_configure(settings, lm_=None):
        dspy.configure(lm=lm, adapter=dspy.ChatAdapter())
        return lm

    monkeypatch.setattr(hqa.app, "configure_dspy", fake_configure)

    def run(*argv):
        return main(list(argv))

    run.art = art
    run.lm = lm
    return run


@pytest.fixture(scope="module")
def store(built_pack):
    """The session pack's SPARQL store, in process (a 5 s timeout, 20 rows a query)."""
    from hqa.retrievers.sparql.backends import OxigraphSparql

    return OxigraphSparql(built_pack / "pack" / "kg", timeout=5, limit=20)


@pytest.fixture(scope="module")
def kg(built_pack) -> Path:
    """The session pack's SPARQL store folder."""
    return built_pack / "pack" / "kg"


@pytest.fixture(scope="module")
def overlap():
    """compmix/train examples whose question has a human trace or a human merge example (leakage tests' dev set)."""
    from demokit import HUMAN

    from hqa.data.datasets import load_examples, question_key
    from hqa.data.human import load_human_library
    from hqa.optimize.compile import merge_demos

    keys = {question_key(d.question) for d in load_human_library(HUMAN)} | {question_key(d.question)
                                                                           for d in merge_demos(HUMAN)}
    found = [ex for ex in load_examples("compmix/train", None) if question_key(ex.question) in keys]
    assert len(found) >= 20
    return found


@pytest.fixture()
def always_metric(monkeypatch):
    """A metric every trace passes, so bootstrapping keeps traces whatever the LM said."""
    from hqa.scoring.metrics import METRICS

    monkeypatch.setitem(METRICS, "always", lambda example, pred, trace=None: True)
    return "always"


@pytest.fixture(scope="module")
def llama_server():
    """A real ``python -m llama_cpp.server`` behind a recording proxy, one per test module (tests/llamakit.py)."""
    from llamakit import llama_server_behind_a_proxy

    with llama_server_behind_a_proxy() as proxy:
        yield proxy

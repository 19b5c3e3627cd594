"""Search-augmented QA: data loading, scoring from the completion only, retrievers, the /retrieve server,
and an expert episode. Everything local: the server binds 127.0.0.1, the embedder is the offline MiniLM."""

from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from talentrl_core.config import EnvConfig
from talentrl_core.envs.base import Task
from talentrl_core.envs.qa.data import CONTEXT_SETS, EVAL_SETS, QADataError, load_eval_set, load_qa_file
from talentrl_core.envs.qa.env import INVALID_QA_OBS, QAEnv, QAFamily
from talentrl_core.envs.qa.retrieval import BM25Retriever, Passage, Retriever, load_corpus
from talentrl_core.envs.qa.serving import HttpRetriever, main as retrieval_main, make_app
from talentrl_core.envs.qa.scoring import answer_score, em_reward, exact_match, extract_answer, f1

EXPECTED = {"nq": 1000, "triviaqa": 1000, "popqa": 1000, "hotpotqa": 500, "2wiki": 500, "musique": 500, "bamboogle": 125}


@pytest.fixture(scope="module")
def family(shared_data, tmp_path_factory) -> QAFamily:
    cfg = EnvConfig(name="qa", max_steps=4, topk=3, invalid_penalty=-0.1)
    return QAFamily(cfg, tmp_path_factory.mktemp("qa-cache"), data_dir=shared_data)


@pytest.fixture(scope="module")
def corpus_path(shared_data) -> Path:
    return shared_data / "qa" / "corpus" / "flashrag_sample_data.jsonl"


# ------------------------------------------------------------------------------------------------ data


def test_eval_sets_row_counts_and_normalised_rows(shared_data):
    counts = {name: len(load_eval_set(name, shared_data)) for name in EVAL_SETS}
    assert counts == EXPECTED
    for name in ("nq", "triviaqa", "hotpotqa", "bamboogle"):
        ex = load_eval_set(name, shared_data)[0]
        assert ex.id and ex.question and ex.source == name and ex.set_name == name
        assert isinstance(ex.golden_answers, tuple) and all(isinstance(a, str) and a for a in ex.golden_answers)
        assert ex.paragraphs is None and ex.supporting_facts is None
    assert len(load_eval_set("triviaqa", shared_data)[0].golden_answers) > 1  # alias lists kept


def test_family_counts_splits_and_tasks(family):
    counts = family.counts()
    assert {k: counts[k] for k in EXPECTED} == EXPECTED
    assert counts["train"] == 350  # stage_1, the default qa_train_file
    assert {k: counts[k] for k in CONTEXT_SETS} == {k: v[1] for k, v in CONTEXT_SETS.items()}

    tasks = family.tasks("hotpotqa")
    assert len(tasks) == 500 and tasks[0].env == "qa" and tasks[0].task_type == "hotpotqa"
    assert tasks[0].key == f"hotpotqa/{tasks[0].key.split('/', 1)[1]}" and tasks[0].split == "hotpotqa"
    assert Task.from_json(tasks[0].to_json()) == tasks[0]
    sub = family.tasks("nq", n=10, seed=3)
    assert [t.task_id for t in sub] == [t.task_id for t in family.tasks("nq", n=10, seed=3)]
    assert len(sub) == 10 and sub != family.tasks("nq", n=10, seed=4)

    ctx = family.tasks("hotpotqa_distractor")[0]
    assert ctx.task_type == "hotpotqa" and len(ctx.payload["paragraphs"]) == 10
    assert ctx.payload["supporting_facts"] and ctx.payload["golden_answers"]

    train = family.tasks("train")
    assert train[0].split == "train" and train[0].key.startswith("stage_1/")
    assert {t.task_type for t in train} == {"hotpotqa", "2wiki"}  # inferred from the question templates
    assert len(family.tasks("eval")) == sum(EXPECTED.values())


def test_malformed_row_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    good = {"id": "q1", "question": "Who?", "golden_answers": ["X"]}
    bad.write_text(json.dumps(good) + "\n" + json.dumps({"id": "q2", "golden_answers": ["Y"]}) + "\n")
    with pytest.raises(QADataError, match=r"bad\.jsonl:2: 'question'"):
        load_qa_file(bad, "bad", source="nq")
    bad.write_text(json.dumps(good) + "\n\n{not json\n")
    with pytest.raises(QADataError, match=r"bad\.jsonl:3: not valid JSON"):
        load_qa_file(bad, "bad", source="nq")
    bad.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(QADataError, match=r"bad\.jsonl:2: duplicate id 'q1'"):
        load_qa_file(bad, "bad", source="nq")
    bad.write_text(json.dumps(good) + "\n")
    with pytest.raises(QADataError, match="1 rows, expected 2"):
        load_qa_file(bad, "bad", source="nq", expected_rows=2)


# --------------------------------------------------------------------------------------------- scoring


def test_reward_is_computed_from_the_completion_only():
    question = "Paris is the capital of which country, France or Spain?"
    gold = ["France"]
    prompt = f"Example: <answer>France</answer>\nQuestion: {question}"
    # The completion repeats the question (which contains the answer) but gives no <answer>: 0.
    completion = f"<think>{question} Hmm.</think><search>capital of France</search>"
    assert extract_answer(completion) is None
    assert answer_score(completion, gold) == 0.0
    assert em_reward([completion], [gold]) == [0.0]
    assert answer_score(prompt + completion, gold) == 1.0  # what scoring the prompt (Search-R1's bug) would give
    # The last answer of the completion counts.
    assert em_reward(["<answer>Spain</answer> no: <answer>the France</answer>"], [gold]) == [1.0]
    assert exact_match("France.", "france") == 1.0 and f1("", gold) == 0.0


# ------------------------------------------------------------------------------------------- retrieval


def test_bm25_finds_passage_with_known_term(corpus_path):
    t0 = time.perf_counter()
    r = BM25Retriever.from_corpus(corpus_path)
    assert time.perf_counter() - t0 < 10
    assert isinstance(r, Retriever) and len(r.passages) == 1000
    hits = r.search(["Evan Morris lobbyist", "zzzz-no-such-term"], topk=3)
    assert len(hits) == 2 and all(len(h) == 3 for h in hits)
    assert hits[0][0].title == "Evan Morris" and "lobbyist" in hits[0][0].contents
    assert hits[0][0].score > hits[0][1].score >= 0


def test_bm25_over_a_question_paragraph_list():
    paras = [
        {"title": "Ed Oxenbould", "sentences": ["Ed Oxenbould is an Australian actor."]},
        {"title": "Ben Oxenbould", "sentences": ["Ben Oxenbould is Ed Oxenbould's uncle."]},
        {"title": "Paper Planes", "sentences": ["Paper Planes stars Ed Oxenbould."]},
        {"title": "The Visit", "sentences": ["The Visit features Ed Oxenbould."]},
    ]
    # "oxenbould" is in every paragraph: rank_bm25's own idf would score it 0 everywhere.
    top = BM25Retriever.from_paragraphs(paras).search(["Ed Oxenbould actor"], topk=2)[0]
    assert top[0].title == "Ed Oxenbould" and top[0].score > 0


@contextmanager
def serve(app):
    """Run ``app`` with uvicorn in a thread on a free loopback port; yield the /retrieve URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "retrieval server did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}/retrieve"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_http_server_matches_in_process_retriever(corpus_path):
    local = BM25Retriever.from_corpus(corpus_path)
    queries = ["Evan Morris lobbyist", "football club founded", "river"]
    with serve(make_app(local)) as url:
        client = HttpRetriever(url, timeout_s=10)
        try:
            assert client.search(queries, 4) == local.search(queries, 4)
        finally:
            client.close()
        with httpx.Client(trust_env=False, timeout=10) as h:
            body = h.post(url, json={"queries": ["Evan Morris"], "topk": 2, "return_scores": True}).json()
            assert set(body["result"][0][0]) == {"document", "score"}
            assert set(body["result"][0][0]["document"]) == {"id", "contents"}
            bare = h.post(url, json={"queries": ["Evan Morris"], "topk": 2}).json()  # Search-R1: no scores
            assert bare["result"][0][0] == body["result"][0][0]["document"]
            assert h.post(url, json={"queries": ["x"], "topk": 0}).status_code == 422
    with pytest.raises(httpx.TransportError):  # server gone: transport errors are retried, then raised
        HttpRetriever(url, timeout_s=2, attempts=2).search(["x"], 1)


def test_retrieval_cli_query_mode(corpus_path, capsys):
    retrieval_main(["--corpus", str(corpus_path), "--query", "Evan Morris", "--topk", "1"])
    assert "Doc 1(Title: Evan Morris)" in capsys.readouterr().out


def test_dense_retriever_minilm_lancedb(shared_data, tmp_path):
    from talentrl_core.envs.qa.retrieval import DenseRetriever, load_embedder

    passages = load_corpus(shared_data / "qa" / "corpus" / "searchr1_example_corpus.jsonl")
    model = load_embedder()
    d = DenseRetriever(passages, tmp_path / "db", model=model)
    assert d.built
    hit = d.search(["Evan Morris lobbyist"], topk=2)[0]
    assert hit[0].title == "Evan Morris" and -1.0 <= hit[1].score <= hit[0].score <= 1.0
    again = DenseRetriever(passages, tmp_path / "db", model=model)
    assert not again.built and again.search(["Evan Morris lobbyist"], 2) == [hit]  # vectors reused


# --------------------------------------------------------------------------------------------- the env


def test_expert_wins_a_hotpotqa_distractor_episode(family):
    env = family.make()
    task = family.tasks("hotpotqa_distractor")[0]
    obs = env.reset(task)
    assert obs == task.payload["question"] == env.goal()
    assert env.admissible_actions() is None
    support = {t for t, _ in task.payload["supporting_facts"]}
    for _ in range(family.cfg.max_steps):
        action = env.expert_action()
        result = env.step(action)
        assert result.info["valid"]
        if action.startswith("<search>"):
            assert result.observation.startswith("<information>Doc 1(Title: ") and not result.done
        if result.done:
            break
    assert result.done and result.won and result.reward == 1.0
    assert result.info["em"] == 1.0 and result.info["f1"] == 1.0
    assert support <= env.seen_titles  # the oracle's searches surfaced every supporting paragraph
    assert env.expert_action() is None


def test_invalid_actions_and_wrong_answer(family):
    env = family.make()
    task = family.tasks("hotpotqa_distractor")[1]
    env.reset(task)
    for bad in ["search for it", "<think>hmm</think>", "<search>  </search>", "", "<answer>x</answer><answer>y</answer>"]:
        r = env.step(bad)
        assert not r.info["valid"] and not r.done and r.observation == INVALID_QA_OBS
        assert r.reward == 0.0  # the rollout loop adds env.invalid_penalty for valid=False
    r = env.step("<answer>definitely not it</answer>")
    assert r.done and not r.won and r.reward == 0.0 and r.info["em"] == 0.0 and r.info["valid"]


def test_question_without_paragraphs_uses_the_corpus_retriever(family):
    env = family.make()
    task = family.tasks("nq")[0]
    env.reset(task)
    assert env.expert_action() is None  # no supporting facts: no oracle
    r = env.step("<search>Evan Morris</search>")
    assert "Doc 1(Title: Evan Morris)" in r.observation and r.info["doc_ids"]
    r = env.step(f"<answer>{task.payload['golden_answers'][0]}</answer>")
    assert r.won and r.reward == 1.0


def test_family_pickles_for_worker_processes(family, shared_data, tmp_path, monkeypatch):
    import pickle

    family.corpus_retriever()  # built: dropped from the pickle, rebuilt on first use in the worker
    clone = pickle.loads(pickle.dumps(family))
    assert clone._retriever is None and clone.data_dir == family.data_dir
    env = clone.make()
    env.reset(clone.tasks("nq")[0])
    assert "Doc 1(Title: Evan Morris)" in env.step("<search>Evan Morris</search>").observation
    # A composed config (no ${data_dir}) finds the data folder from its own paths.
    composed = EnvConfig(name="qa", qa_train_file=str(shared_data / "qa/train/stage_2.jsonl"))
    monkeypatch.setenv("TALENTRL_DATA_DIR", str(tmp_path / "elsewhere"))
    fam = QAFamily(composed, tmp_path)
    assert fam.data_dir == shared_data and len(fam.tasks("bamboogle")) == 125 and len(fam.tasks("train")) == 8148


def test_env_alone_without_corpus_retriever_explains(family):
    env = QAEnv(family.cfg)
    env.reset(family.tasks("bamboogle")[0])
    with pytest.raises(RuntimeError, match="without a corpus retriever"):
        env.step("<search>anything</search>")
    env.reset(family.tasks("musique_hipporag")[0])  # paragraphs carried: no corpus needed
    assert env.step(env.expert_action()).observation.startswith("<information>")
    assert Passage("1", "no title line").title == ""


def test_invalid_penalty_reaches_the_qa_return(family):
    """env.invalid_penalty is part of every family's return, QA included (it used to keep only the answer's EM)."""
    from talentrl_core.generation import GenResult
    from talentrl_core.policies import ExpertPolicy
    from talentrl_core.rollout import EpisodeSpec, RolloutSettings, run_episodes

    class OneSlipThenExpert(ExpertPolicy):
        slipped = False

        def complete(self, items):
            if not self.slipped and all(it.kind == "exec" for it in items):
                self.slipped = True
                return [GenResult(text="search for it", token_ids=[], prompt_tokens=0) for _ in items]
            return super().complete(items)

    task = family.tasks("hotpotqa_distractor")[0]
    settings = RolloutSettings.of(family.cfg, run_id="qa-penalty", split="hotpotqa_distractor")
    (t,) = run_episodes(family.make, [EpisodeSpec(task)], OneSlipThenExpert(), settings, progress=False)
    assert t.success and sum(not s.valid for s in t.steps) == 1
    assert t.final_reward == pytest.approx(1.0 + family.cfg.invalid_penalty)  # EM 1, one invalid step at -0.1

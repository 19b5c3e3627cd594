"""LLM-teacher distiller against a small OpenAI-compatible FastAPI app on 127.0.0.1 (started in a thread)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI, Request

from talentrl_core.config import Distiller, LibraryConfig
from talentrl_core.library import Library, distill_library, export_bank
from talentrl_core.library.distill_teacher import SkillsAnswer, extract_json
from talentrl_core.library.embed import HashingEmbedder
from talentrl_core.library.examples import alfworld_trajectories
from talentrl_core.library.teacher_client import OpenAIChat, ResponseCache, Teacher, TeacherError

SECRET = "sk-test-do-not-store-0123456789"


class Script:
    """What the fake teacher does; the test changes it between calls."""

    def __init__(self):
        self.hits: Counter = Counter()
        self.auth: list[str] = []
        self.slow_requests: int = 0
        "The next this-many requests sleep ``slow_s`` before answering."
        self.slow_s: float = 0.0
        self.malformed_for: str = ""
        self.status_next: int = 0


def _kind(user: str) -> str:
    for k in ("GENERAL", "TASK-SPECIFIC", "MISTAKES", "TALENTS"):
        if k in user:
            return k
    return "OTHER"


_ADVICE = [
    ("Search once", "Visit every receptacle once, opening closed ones, before revisiting any of them."),
    ("Carry directly", "Holding the object, walk straight to the target receptacle and put it there."),
]


def _skills(prefix: str, n: int = 2) -> dict:
    return {"skills": [
        {"title": f"{title} ({prefix})", "principle": principle, "when_to_apply": f"When working on {prefix}.",
         "example": "go to desk 1, take pen 1 from desk 1"}
        for title, principle in _ADVICE[:n]
    ]}


def make_app(script: Script) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        script.auth.append(request.headers.get("authorization", ""))
        user = body["messages"][-1]["content"]
        kind = _kind(user)
        script.hits[kind] += 1
        script.hits["total"] += 1
        if script.slow_requests > 0:
            script.slow_requests -= 1
            await asyncio.sleep(script.slow_s)
        if script.status_next:
            from fastapi.responses import JSONResponse

            code, script.status_next = script.status_next, 0
            return JSONResponse({"error": "busy"}, status_code=code)
        m = re.search(r"Task type: (\S+)", user)
        task_type = m.group(1) if m else "all"
        if kind == "TALENTS":
            ids = re.findall(r"^([GSM]-[0-9a-f]{8}) \[", user, re.M)
            half = max(1, len(ids) // 2)
            content = json.dumps({"talents": [
                {"name": "Locate then transform", "strategy": "Find the object first, then change its state, then place it.",
                 "when_to_apply": "heat, cool and clean tasks",
                 "skills": [{"id": i, "weight": 0.9} for i in ids[:half]] + [{"id": "S-deadbeef", "weight": 0.5}]},
                {"name": "Direct placement", "strategy": "Take the object and put it where the goal says.",
                 "when_to_apply": "pick and place tasks", "skills": [{"id": i, "weight": 0.6} for i in ids[half:]]},
            ]})
        elif script.malformed_for and kind == "TASK-SPECIFIC" and task_type == script.malformed_for:
            content = 'Here are the skills: {"skills": [ {"title": "broken"'  # not JSON
        else:
            content = "```json\n" + json.dumps(_skills(f"{kind.lower()} {task_type}")) + "\n```"
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}

    return app


@pytest.fixture(scope="module")
def server():
    script = Script()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(make_app(script), log_level="warning", lifespan="off"))
    th = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    th.start()
    deadline = time.time() + 20
    while not srv.started:
        if time.time() > deadline:
            raise RuntimeError("fake teacher server did not start")
        time.sleep(0.05)
    yield script, f"http://127.0.0.1:{port}/v1"
    srv.should_exit = True
    th.join(timeout=5)
    sock.close()


def test_extract_json_and_schema():
    assert extract_json('```json\n{"skills": []}\n```') == {"skills": []}
    with pytest.raises(ValueError):
        extract_json('{"skills": [ {"title"')
    with pytest.raises(ValueError):  # pydantic: an empty list is not an answer
        SkillsAnswer.model_validate({"skills": []})


def test_timeout_then_success_and_cache(server, tmp_path, monkeypatch):
    script, url = server
    monkeypatch.setenv("TEACHER_API_KEY", SECRET)
    client = OpenAIChat(url, "fake-teacher", "TEACHER_API_KEY", timeout_s=0.5, retries=3, backoff_s=0.01)
    teacher = Teacher(client, ResponseCache(tmp_path / "cache"))
    msgs = [{"role": "user", "content": "GENERAL please, retry test"}]
    script.slow_requests, script.slow_s = 1, 2.0  # the first attempt times out, the retry succeeds
    before = script.hits["total"]
    ans = teacher.ask(msgs, lambda s: SkillsAnswer.model_validate(extract_json(s)))
    assert ans is not None and len(ans.skills) == 2
    assert script.hits["total"] - before == 2 and client.n_retries == 1
    assert script.auth[-1] == f"Bearer {SECRET}"
    # the same prompt again: served from the cache, the server is not called
    hits = script.hits["total"]
    again = Teacher(client, ResponseCache(tmp_path / "cache")).ask(msgs, lambda s: SkillsAnswer.model_validate(extract_json(s)))
    assert again == ans and script.hits["total"] == hits
    assert all(SECRET not in p.read_text() for p in (tmp_path / "cache").rglob("*.json"))
    # a 503 is retried too; a server that keeps timing out ends in TeacherError (no secret in the message)
    script.status_next = 503
    assert teacher.ask([{"role": "user", "content": "GENERAL 503"}], lambda s: extract_json(s)) is not None
    slow = OpenAIChat(url, "fake-teacher", "TEACHER_API_KEY", timeout_s=0.2, retries=2, backoff_s=0.01)
    script.slow_requests, script.slow_s = 2, 1.0
    with pytest.raises(TeacherError) as err:
        slow([{"role": "user", "content": "GENERAL slow"}])
    assert SECRET not in str(err.value)


def test_teacher_distillation(server, tmp_path, monkeypatch, caplog):
    script, url = server
    monkeypatch.setenv("TEACHER_API_KEY", SECRET)
    caplog.set_level(logging.DEBUG)
    trajs = alfworld_trajectories(n_success=2, n_failure=1)
    types = sorted({t.task_type for t in trajs})
    cfg = LibraryConfig(
        uri=str(tmp_path / "db"), embedder="hashing", distiller=Distiller.teacher, teacher_base_url=url,
        teacher_model="fake-teacher", teacher_timeout_s=5, teacher_backoff_s=0.01,
    )
    script.malformed_for = "pick_cool_then_place_in_recep"
    before = script.hits["total"]
    meta = distill_library(trajs, cfg, "alfworld", embedder=HashingEmbedder())
    n_prompts = 1 + len(types) + len(types) + 1  # general, specific per type, mistakes per type, talents
    assert script.hits["total"] - before == n_prompts
    tm = meta["teacher"]
    assert tm["unusable"] == 1 and "specific pick_cool_then_place_in_recep" in tm["unusable_reasons"][0]
    assert tm["dropped_links"] == 1 and meta["n_talents"] == 2
    per_type = meta["skills"]["per_task_type"]
    assert per_type["pick_cool_then_place_in_recep"]["specific"] == 0  # the malformed answer was skipped
    assert all(per_type[tt]["specific"] == 2 for tt in types if tt != "pick_cool_then_place_in_recep")
    assert all(per_type[tt]["mistake"] == 2 and per_type[tt]["general"] == 2 for tt in types)
    lib = Library.open(cfg.uri, cfg=cfg, embedder=HashingEmbedder())
    assert all(sid in {s.skill_id for s in lib.skills()} for t in lib.talents() for sid in t.skill_ids)
    assert meta["label_coverage"] == 1.0 and all(lib.oracle_talent("alfworld", tt) for tt in types)
    # the key was sent, and is nowhere in the library, the caches, the bank or the logs
    assert script.auth[-1] == f"Bearer {SECRET}"
    export_bank(lib, tmp_path / "bank.json")
    for p in [tmp_path / "bank.json", *Path(tmp_path).rglob("*.json")]:
        assert SECRET not in p.read_text(errors="ignore")
    assert SECRET not in caplog.text and SECRET not in json.dumps(meta)
    # a second run: every usable answer comes from the cache; only the unusable prompt is asked again
    hits = script.hits["total"]
    meta2 = distill_library(trajs, cfg, "alfworld", embedder=HashingEmbedder())
    assert script.hits["total"] - hits == 1
    assert meta2["teacher"]["cache_hits"] == n_prompts - 1 and meta2["version"] == meta["version"] + 1


def test_local_generator_callable(tmp_path):
    """A GPU user passes a local model as a callable (e.g. hf_generator); same schema, same cache."""
    calls = []

    def generate(messages):
        calls.append(messages)
        user = messages[-1]["content"]
        if "TALENTS" in user:
            ids = re.findall(r"^([GSM]-[0-9a-f]{8}) \[", user, re.M)
            return json.dumps({"talents": [{"name": "All in one", "strategy": "Use every skill in order.", "when_to_apply": "any task",
                                            "skills": [{"id": i, "weight": 1.0} for i in ids]}]})
        return json.dumps(_skills(_kind(user).lower(), 1))

    generate.model_id = "local:test"
    cfg = LibraryConfig(uri=str(tmp_path / "db"), embedder="hashing")
    trajs = [t for t in alfworld_trajectories(n_success=2, n_failure=1) if t.task_type == "pick_heat_then_place_in_recep"]
    meta = distill_library(trajs, cfg, "alfworld", embedder=HashingEmbedder(), generator=generate)
    assert meta["distiller"] == "teacher" and meta["teacher"]["model"] == "local:test"
    assert meta["n_talents"] == 1 and meta["label_coverage"] == 1.0
    assert len(calls) == 4


def test_teacher_talents_link_the_mistakes_of_the_tasks_they_solve(tmp_path):
    """A teacher that links its talents to general skills only: each talent also gets the mistakes of the task types
    of the trajectories labelled with it, weighted by their share (as offline talents: docs/talents.md §14)."""
    def generate(messages):
        user = messages[-1]["content"]
        if "TALENTS" in user:
            general = re.findall(r"^(G-[0-9a-f]{8}) \[", user, re.M)
            return json.dumps({"talents": [
                {"name": name, "strategy": advice, "when_to_apply": "any task", "skills": [{"id": i, "weight": 1.0} for i in general]}
                for name, advice in _ADVICE]})
        return json.dumps(_skills(_kind(user).lower(), 1))

    generate.model_id = "local:test"
    cfg = LibraryConfig(uri=str(tmp_path / "db"), embedder="hashing", min_support=0.2)
    trajs = alfworld_trajectories(n_success=2, n_failure=1)
    distill_library(trajs, cfg, "alfworld", embedder=HashingEmbedder(), generator=generate)
    lib = Library.open(cfg.uri, cfg=cfg, embedder=HashingEmbedder())
    mistakes = lib.skills("alfworld", kind="mistake")
    type_of = {t.traj_uid: t.task_type for t in trajs}
    linked = 0
    for talent in lib.talents("alfworld"):
        types = Counter(type_of[l.traj_uid] for l in lib.labels("alfworld") if l.kind == "traj" and l.talent_id == talent.talent_id)
        for m in mistakes:
            share = sum(c for tt, c in types.items() if tt in m.task_types) / max(1, sum(types.values()))
            assert talent.weights().get(m.skill_id) == (pytest.approx(share, abs=1e-5) if share >= 0.2 else None)
            linked += share >= 0.2
    assert mistakes and linked


def test_a_teacher_with_no_usable_answer_commits_nothing(tmp_path):
    """Unusable JSON on every prompt: no empty library version becomes the latest; the error says so."""
    def garbage(messages):
        return "I cannot help with that {"

    garbage.model_id = "local:garbage"
    cfg = LibraryConfig(uri=str(tmp_path / "db"), embedder="hashing")
    trajs = alfworld_trajectories(n_success=2, n_failure=1)
    with pytest.raises(ValueError, match=r"teacher distiller produced no skills and no talents .* stays at version 0"):
        distill_library(trajs, cfg, "alfworld", embedder=HashingEmbedder(), generator=garbage)
    assert Library.open(cfg.uri, cfg=cfg, embedder=HashingEmbedder()).latest_version == 0

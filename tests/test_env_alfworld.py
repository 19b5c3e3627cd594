"""ALFWorld family on the real games (talentrl_core/envs/alfworld.py).

The archive is unpacked once per test session into ``session_cache``; games are loaded a handful of
times (a load + reset is ~1 s, a step ~50 ms). Full-split expert checks are @slow.
"""

from __future__ import annotations

import random
import tarfile
from pathlib import Path

import pytest

from talentrl_core.config import EnvConfig
from talentrl_core.envs.alfworld.data import SPLIT_SIZES, TASK_TYPES, AlfworldDataError, ensure_unpacked, parse_game_key
from talentrl_core.envs.alfworld.env import AlfworldEnv
from talentrl_core.envs.alfworld.family import AlfworldFamily, check_split
from talentrl_core.envs.base import Env, EnvFamily, Task

# A two-object game in a bedroom whose desk and drawers share one location: it needs the `move X to Y`
# tracking fix, the same-receptacle fix and the co-located `examine` fix to be won by the handcoded expert.
PICK_TWO = "valid_seen/pick_two_obj_and_place-CD-None-Drawer-304/trial_T20190907_230232_832893/game.tw-pddl"
FIRST_VALID_SEEN = "valid_seen/look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790/game.tw-pddl"


def _cfg(shared_data: Path, **kw) -> EnvConfig:
    return EnvConfig(name="alfworld", alfworld_archive=str(shared_data / "alfworld" / "json_2.1.1_all.tar.xz"), **kw)


@pytest.fixture(scope="module")
def family(shared_data, session_cache) -> AlfworldFamily:
    fam = AlfworldFamily(_cfg(shared_data, max_steps=50), session_cache)
    fam.root  # unpack once (reused by every later family on this cache)
    return fam


@pytest.fixture(scope="module")
def pick_two(family) -> Task:
    (task,) = [t for t in family.tasks("valid_seen") if t.key == PICK_TWO]
    return task


@pytest.fixture(scope="module")
def env(family):
    e = family.make()
    yield e
    e.close()


def _play(env: AlfworldEnv, task: Task, limit: int = 50):
    env.reset(task)
    actions, res = [], None
    for _ in range(limit):
        a = env.expert_action()
        assert a is not None, "the expert gave up"
        res = env.step(a)
        actions.append(a)
        assert res.info["valid"], f"expert action {a!r} not admissible"
        if res.done:
            break
    return actions, res


# ---------------------------------------------------------------------------------------------- data


def test_unpack_once_and_split_counts(family, session_cache, shared_data):
    for split, n in SPLIT_SIZES.items():
        tasks = family.tasks(split)
        assert len(tasks) == n
        assert {t.task_type for t in tasks} <= set(TASK_TYPES)
    assert {t.task_type for t in family.tasks("valid_seen")} == set(TASK_TYPES)
    assert family.task_types() == list(TASK_TYPES)
    index = session_cache / "alfworld" / "talentrl_index.json"
    mtime = index.stat().st_mtime_ns
    # a second family (another process would do the same) reuses the unpacked folder
    again = AlfworldFamily(_cfg(shared_data), session_cache)
    assert again.root == family.root
    assert len(again.tasks("valid_unseen")) == SPLIT_SIZES["valid_unseen"]
    assert index.stat().st_mtime_ns == mtime


def test_the_learning_curves_panel_is_held_out_from_train(family):
    """``alfworld_valid_train`` sizes the SFT (docs/alfworld.md): trials of the training tasks, none a train game."""
    from talentrl_core.envs.registry import panel_family

    assert panel_family("alfworld_valid_train") == ("alfworld", "valid_train")
    trial = lambda t: t.key.split("/", 1)[1]  # noqa: E731 - the game's path under its split folder
    held_out, train = family.tasks("valid_train"), family.tasks("train")
    assert not {trial(t) for t in held_out} & {trial(t) for t in train}
    assert {t.key.split("/")[1] for t in held_out} <= {t.key.split("/")[1] for t in train}  # the same task specs


def test_bad_archives_raise_clear_errors(tmp_path):
    with pytest.raises(AlfworldDataError, match="not found"):
        ensure_unpacked(tmp_path / "missing.tar.xz", tmp_path / "cache")
    # a well-formed archive with the wrong number of games
    game = tmp_path / "src" / "json_2.1.1" / "valid_seen" / "pick_and_place_simple-Mug-None-Desk-1" / "trial_T1"
    game.mkdir(parents=True)
    (game / "game.tw-pddl").write_text("{}")
    archive = tmp_path / "small.tar.xz"
    with tarfile.open(archive, "w:xz") as tf:
        tf.add(tmp_path / "src" / "json_2.1.1", arcname="json_2.1.1")
    with pytest.raises(AlfworldDataError, match="expected ALFWorld splits"):
        ensure_unpacked(archive, tmp_path / "cache")
    assert not (tmp_path / "cache" / "alfworld").exists()  # nothing half-written is left behind
    with pytest.raises(AlfworldDataError, match="unresolved"):
        AlfworldFamily(EnvConfig(alfworld_archive="${nowhere}/x.tar.xz"), tmp_path)


def test_task_ids_are_deterministic_and_relative(family):
    a, b = family.tasks("valid_seen"), family.tasks("valid_seen")
    assert a == b and [t.task_id for t in a] == [t.task_id for t in b]
    assert a[0].key == FIRST_VALID_SEEN  # sorted, relative to the unpacked root: same on every machine
    assert a[0].task_id == "alfworld-valid_seen-91ef25ca441b"
    assert [t.key for t in a] == sorted(t.key for t in a)
    for t in a:
        assert not Path(t.key).is_absolute() and t.key.startswith("valid_seen/")
        assert t.task_type == parse_game_key(t.key)["task_type"] == t.key.split("/")[1].split("-")[0]
        assert Task.from_json(t.to_json()) == t
    assert len({t.task_id for t in family.tasks("train")}) == SPLIT_SIZES["train"]


def test_seeded_subsets(family):
    s0 = family.tasks("train", n=20, seed=0)
    assert len(s0) == 20 and s0 == family.tasks("train", n=20, seed=0)
    assert [t.key for t in s0] == sorted(t.key for t in s0)
    assert {t.key for t in s0} <= {t.key for t in family.tasks("train")}
    assert s0 != family.tasks("train", n=20, seed=1)
    assert len(family.tasks("valid_seen", n=1000)) == SPLIT_SIZES["valid_seen"]
    with pytest.raises(ValueError, match="split"):
        family.tasks("test")


def test_parse_game_key():
    p = parse_game_key(PICK_TWO)
    assert (p["task_type"], p["object_target"], p["parent_target"], p["toggle_target"]) == (
        "pick_two_obj_and_place", "CD", "Drawer", "")
    with pytest.raises(ValueError):
        parse_game_key("valid_seen/unknown-A-B-C-1/trial/game.tw-pddl")


# ---------------------------------------------------------------------------------------------- play


def test_protocol_conformance(family, env):
    assert isinstance(env, Env)
    for member in EnvFamily.__annotations__.keys() | {"tasks", "make", "task_types"}:
        assert hasattr(family, member)
    assert env.name == family.name == "alfworld"
    with pytest.raises(RuntimeError, match="reset"):
        env.goal()


def test_handcoded_expert_wins_pick_two_through_protocol(env, pick_two):
    random.seed(1234)
    outer = random.getstate()
    obs = env.reset(pick_two)
    assert "Your task is to: put two cd in drawer." in obs and "Welcome" not in obs
    assert env.goal() == "put two cd in drawer."
    assert env.expert == "handcoded"
    actions, res = _play(env, pick_two)
    assert res.won and res.done and res.reward == 1.0
    assert sum(a.startswith("move cd") for a in actions) == 2
    assert env.expert_action() is None  # episode over
    assert env.step("look").done  # stepping a finished episode does not raise
    assert random.getstate() == outer  # the expert's random choices do not touch the global generator
    # deterministic: the same task replays the same expert trajectory (reset reuses the loaded game)
    again, res2 = _play(env, pick_two)
    assert again == actions and res2.won


def test_inadmissible_action_is_not_an_error(env, pick_two):
    env.reset(pick_two)
    admissible = env.admissible_actions()
    assert "look" in admissible and "fly to the moon" not in admissible
    res = env.step("fly to the moon")
    assert res.info["valid"] is False
    assert res.observation == "Nothing happens."
    assert res.reward == 0.0 and not res.done and not res.won
    res = env.step("  Go to   SHELF 1 ")  # case and spacing are normalised
    assert res.info["valid"] is True and res.observation.startswith("You arrive at shelf 1.")


def test_same_task_same_first_observation(family, pick_two):
    e1, e2 = family.make(), family.make()
    try:
        o1, o2 = e1.reset(pick_two), e2.reset(pick_two)
        assert o1 == o2
        assert e1.admissible_actions() == e2.admissible_actions()
        assert e1.expert_action() == e2.expert_action()
        r1, r2 = e1.step(e1.expert_action()), e2.step(e2.expert_action())
        assert r1.observation == r2.observation
        assert e1.expert_action() == e2.expert_action()
    finally:
        e1.close()
        e2.close()


def test_step_limit_truncates(shared_data, session_cache, pick_two):
    env = AlfworldFamily(_cfg(shared_data, max_steps=2), session_cache).make()
    try:
        env.reset(pick_two)
        assert not env.step("look").done
        res = env.step("look")
        assert res.done and not res.won and res.info["truncated"]
    finally:
        env.close()


@pytest.mark.parametrize("expert", ["walkthrough", "planner"])
def test_plan_experts_replan_after_a_detour(shared_data, session_cache, pick_two, expert):
    env = AlfworldFamily(_cfg(shared_data, expert=expert, max_steps=50), session_cache).make()
    try:
        env.reset(pick_two)
        if expert == "walkthrough":
            assert env.expert_action() == env.walkthrough()[0]
        else:
            assert env.expert_action() == env.replan()[0]
        env.step("go to shelf 1")  # off the walkthrough: the planner takes over from here
        actions, res = [], None
        while not (res and res.done):
            a = env.expert_action()
            actions.append(a)
            res = env.step(a)
        assert res.won and len(actions) <= 10
    finally:
        env.close()


# ---------------------------------------------------------------------------------------------- slow


@pytest.mark.slow
@pytest.mark.parametrize("expert", ["handcoded", "walkthrough", "planner"])
def test_experts_win_a_valid_unseen_subset(shared_data, session_cache, expert):
    fam = AlfworldFamily(_cfg(shared_data, expert=expert, max_steps=50), session_cache)
    res = check_split(fam, "valid_unseen", workers=2, n=12, seed=0)
    assert res["wins"] == res["total"] == 12, res["failures"]

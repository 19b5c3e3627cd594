"""ALFWorld's strategy experts (talentrl_core/envs/alfworld/strategies.py) on real games, and their benchmark.

Two games are loaded (a load is ~2 s): a pick-and-place game in a bedroom that every strategy wins, by different
routes, and the two-object game of test_env_alfworld.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from talentrl_core.config import EnvConfig
from talentrl_core.envs.alfworld.env import AlfworldEnv
from talentrl_core.envs.alfworld.family import AlfworldFamily
from talentrl_core.envs.alfworld.strategies import (
    CLOSED_CLASSES,
    containers_first,
    parse_goal,
    recall,
    surfaces_first,
)
from talentrl_core.envs.base import Task
from talentrl_core.envs.strategies import EpisodeView, get_strategy, play, strategies

# "put some book on sidetable." in a bedroom with four drawers: a book lies on the bed.
PLACE = "valid_seen/pick_and_place_simple-Book-None-SideTable-329/trial_T20190908_050633_745514/game.tw-pddl"
PICK_TWO = "valid_seen/pick_two_obj_and_place-CD-None-Drawer-304/trial_T20190907_230232_832893/game.tw-pddl"
BUDGET = 30
ROOT = Path(__file__).resolve().parent.parent


def _archive(shared_data: Path) -> str:
    return str(shared_data / "alfworld" / "json_2.1.1_all.tar.xz")


@pytest.fixture(scope="module")
def family(shared_data, session_cache) -> AlfworldFamily:
    return AlfworldFamily(EnvConfig(name="alfworld", alfworld_archive=_archive(shared_data), max_steps=BUDGET),
                          session_cache)


@pytest.fixture(scope="module")
def games(family) -> dict[str, Task]:
    return {t.key: t for t in family.tasks("valid_seen") if t.key in (PLACE, PICK_TWO)}


@pytest.fixture(scope="module")
def env(family):
    e = family.make()
    yield e
    e.close()


def _play(env: AlfworldEnv, task: Task, name: str) -> tuple[list[str], bool]:
    ep = play(env, task, name, require_admissible=True)
    return ep.actions, ep.won


def test_registered_and_described():
    names = [s.name for s in strategies("alfworld")]
    assert names == ["surfaces-first", "containers-first"]
    assert all(s.description and s.family == "alfworld" for s in strategies("alfworld"))
    with pytest.raises(KeyError, match="surfaces-first"):
        get_strategy("alfworld", "nope")


def test_search_orders_split_receptacles_by_class():
    room = ["bed 1", "drawer 2", "drawer 1", "sidetable 1", "cabinet 3", "countertop 1"]
    assert surfaces_first(room) == ["bed 1", "sidetable 1", "countertop 1", "drawer 2", "drawer 1", "cabinet 3"]
    assert containers_first(room) == ["drawer 2", "drawer 1", "cabinet 3", "bed 1", "sidetable 1", "countertop 1"]
    assert {"drawer", "cabinet", "fridge", "microwave"} <= CLOSED_CLASSES


def test_goals_of_every_task_type_parse():
    kinds = {
        "put a soapbottle in countertop.": ("place", "soapbottle", "countertop"),
        "put two cd in drawer.": ("two", "cd", "drawer"),
        "clean some fork and put it in drawer.": ("clean", "fork", "drawer"),
        "put a hot potato in fridge.": ("heat", "potato", "fridge"),
        "cool some pan and put it in stoveburner.": ("cool", "pan", "stoveburner"),
        "look at cd under the desklamp.": ("light", "cd", "desklamp"),
    }
    for goal, want in kinds.items():
        g = parse_goal(goal)
        assert (g.kind, g.obj, g.target) == want, goal


def test_unknown_goal_gives_no_action():
    view = EpisodeView("juggle three apples.", "Looking quickly around you, you see a bed 1.", "", ("go to bed 1",))
    assert all(s.act(view) is None for s in strategies("alfworld"))


def test_memory_reads_the_transcript():
    first = ("You are in the middle of a room. Looking quickly around you, you see a drawer 1, and a desk 1.\n\n"
             "Your task is to: put a pen in desk.")
    transcript = (
        ("go to drawer 1", "You arrive at drawer 1. The drawer 1 is closed."),
        ("open drawer 1", "You open the drawer 1. The drawer 1 is open. In it, you see a pen 2, and a key 1."),
        ("take pen 2 from drawer 1", "You pick up the pen 2 from the drawer 1."),
        ("go to desk 1", "Nothing happens."),
    )
    mem = recall(EpisodeView("put a pen in desk.", first, transcript[-1][1], (), transcript))
    assert mem.receptacles == ["drawer 1", "desk 1"]
    assert (mem.at, mem.holding, mem.tried) == ("drawer 1", "pen 2", {"drawer 1", "desk 1"})
    assert mem.seen["drawer 1"] == ["key 1"] and not mem.closed


def test_each_strategy_wins_a_pick_and_place_by_its_own_route(env, games):
    routes = {}
    for s in strategies("alfworld"):
        actions, won = _play(env, games[PLACE], s.name)
        assert won and len(actions) <= BUDGET, (s.name, actions)
        routes[s.name] = actions
    # the room lists "a bed 1, a diningtable 1, a drawer 4, ..., a drawer 1, a garbagecan 1, a sidetable 2, ..."
    assert routes["surfaces-first"] == ["go to bed 1", "take book 1 from bed 1", "go to sidetable 2",
                                        "move book 1 to sidetable 2"]
    assert routes["containers-first"][:6] == ["go to drawer 4", "go to drawer 3", "go to drawer 2", "open drawer 2",
                                              "go to drawer 1", "open drawer 1"]
    assert len({tuple(a) for a in routes.values()}) == len(routes)  # the search orders differ
    # deterministic: the same game replays the same actions, also after another strategy played it
    for name, actions in routes.items():
        assert _play(env, games[PLACE], name)[0] == actions
    assert env.strategy_action("surfaces-first") is None  # the episode is over


def test_two_objects_go_to_one_receptacle(env, games):
    for s in strategies("alfworld"):
        actions, won = _play(env, games[PICK_TWO], s.name)
        assert won, (s.name, actions)
        moves = [a for a in actions if a.startswith("move ")]
        assert len(moves) == 2 and len({m.split(" to ")[1] for m in moves}) == 1


def test_bench_prints_the_matrix(tmp_path, shared_data, session_cache):
    out = tmp_path / "m.json"
    cmd = [sys.executable, str(ROOT / "bench" / "bench_strategies_alfworld.py"), "--types", "pick_and_place_simple",
           "--n", "1", "--max-steps", "12", "--budgets", "6", "--archive", _archive(shared_data),
           "--cache-dir", str(session_cache), "--json", str(out)]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "### budget 12 steps" in res.stdout and "### budget 6 steps" in res.stdout
    data = json.loads(out.read_text())
    assert data["games"] == 1 and {r["strategy"] for r in data["episodes"]} == {"surfaces-first", "containers-first"}
    assert set(data["budgets"]) == {"12", "6"} and "by_object" in data["budgets"]["12"]


def test_the_memory_line_follows_the_agents_own_search(family, games):
    """env.memory: the execution prompt carries what the agent's own past says (issue 39): the receptacles it has
    searched grow, the ones not yet searched shrink, what it holds after a take; a family without one refuses it."""
    import dataclasses

    from talentrl_core.policies import ExpertPolicy
    from talentrl_core.rollout import EpisodeSpec, RolloutSettings, run_episodes

    class Recording(ExpertPolicy):
        prompts: list = []

        def complete(self, items):
            self.prompts += [it.messages[-1]["content"] for it in items if it.kind == "exec"]
            return super().complete(items)

    policy = Recording("surfaces-first")
    settings = RolloutSettings(max_steps=BUDGET, history=1, memory=True)
    traj = run_episodes(family.make, [EpisodeSpec(games[PLACE])], policy, settings, progress=False)[0]
    assert traj.success
    lines = [next(x for x in p.split("\n") if x.startswith("Memory: ")) for p in policy.prompts]
    todo = [len(line.split("not yet searched: ")[1].split(", ")) for line in lines]
    assert lines[0].startswith("Memory: at start; holding nothing") and todo == sorted(todo, reverse=True) and todo[-1] < todo[0]
    assert any("holding book" in line for line in lines)
    policy.prompts.clear()
    run_episodes(family.make, [EpisodeSpec(games[PLACE])], policy, dataclasses.replace(settings, memory=False), progress=False)
    assert policy.prompts and not any("Memory: " in p for p in policy.prompts)
    from talentrl_core.envs import make_family

    with pytest.raises(ValueError, match="textworld has no memory line; families with one: alfworld, webshop"):
        make_family(EnvConfig(memory=True), family.cache_dir)


def test_procedure_talents_one_per_task_type_whatever_search_played(family, games, tmp_path):
    """library.talents_by=procedure (issue 39): the same surfaces-first demonstrations give one talent per task
    procedure, named after it, its description first; the trajectories keep their strategy."""
    from talentrl_core.config import LibraryConfig
    from talentrl_core.envs.alfworld.procedures import DESCRIPTIONS
    from talentrl_core.knowledge import LibraryKnowledge
    from talentrl_core.library import distill_library
    from talentrl_core.library.store import Library
    from talentrl_core.policies import ExpertPolicy
    from talentrl_core.rollout import EpisodeSpec, RolloutSettings, run_episodes

    specs = [EpisodeSpec(games[k], seed=i) for i, k in enumerate((PLACE, PICK_TWO))]
    trajs = run_episodes(family.make, specs, ExpertPolicy("surfaces-first"), RolloutSettings(max_steps=BUDGET), progress=False)
    for i, t in enumerate(trajs):
        t.traj_uid = f"u{i}"
    assert all(t.success and t.strategy == "surfaces-first" for t in trajs)
    cfg = LibraryConfig(uri=str(tmp_path / "db"), embedder="hashing", min_support=0.5, delta=0.0, talents_by="procedure")
    meta = distill_library(trajs, cfg, "alfworld")
    assert set(meta["strategy_talent"]) == {"place", "two-objects"} and len(set(meta["strategy_talent"].values())) == 2
    k = LibraryKnowledge(Library.open(cfg.uri, cfg=cfg), cfg)
    menu = {m.name: m for m in k.menu("alfworld")}
    assert set(menu) == {"Place", "Two-objects"}
    assert all(m.strategy.startswith(DESCRIPTIONS[n.lower()]) for n, m in menu.items())
    assert k.oracle_talent("alfworld", "pick_and_place_simple") == meta["strategy_talent"]["place"]
    assert [t.strategy for t in trajs] == ["surfaces-first"] * 2
    with pytest.raises(ValueError, match="choose strategy or procedure"):
        LibraryConfig(talents_by="task")


def test_teacher_forced_decisions_route_each_game_to_its_procedure_talent():
    """pipeline.decisions on a library of procedure talents (ALFWorld): no talent is distilled from the teacher's
    strategy, so each game is routed to its own procedure's talent (the oracle); an unknown teacher is named with the
    family's strategies; a strategy library still routes to the teacher's talent, or names the ones it has."""
    from talentrl_core.evaluation.decisions import teacher_route

    class Lib:
        def strategy_talents(self, family):
            return {"explore": "T-1", None: "T-2"}

    assert teacher_route("procedure", "alfworld", "surfaces-first", Lib()) == {"routing": "oracle"}
    with pytest.raises(KeyError, match="surfaces-first"):
        teacher_route("procedure", "alfworld", "surface-first", Lib())
    assert teacher_route("strategy", "textworld", "explore", Lib()) == {"routing": "fixed", "talent_id": "T-1"}
    with pytest.raises(ValueError, match=r"choose from \['explore'\]"):
        teacher_route("strategy", "textworld", "follow", Lib())

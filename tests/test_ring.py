"""The ring mix (issue 38, ``experiment=ring``): which talent is better shows only in the reward.

Four rooms in a ring, the coin east or north of the start, a sign in the start room saying which
(``envs/textworld/maps.py``). Both headings win every task at collection's budget; at a budget of two actions only the
one the sign calls for does.
"""

from __future__ import annotations

import pytest

pytest.importorskip("textworld")

from talentrl_core.config import EnvConfig  # noqa: E402
from talentrl_core.envs.strategies import play  # noqa: E402
from talentrl_core.envs.textworld.family import TextWorldFamily  # noqa: E402
from talentrl_core.envs.textworld.maps import RING_COMMANDS, ring_sign  # noqa: E402


@pytest.fixture(scope="module")
def rings(session_cache) -> TextWorldFamily:
    cfg = EnvConfig(challenges=["tw-ring_east", "tw-ring_north"], challenge_settings="route=hidden", train_seeds=[1, 3],
                    max_steps=2, history=1, routing_obs_chars=200)
    fam = TextWorldFamily(cfg, session_cache)
    fam.prepare(fam.tasks("train"), workers=1, progress=False)
    return fam


def test_a_ring_tells_where_the_coin_lies_only_by_its_sign(rings):
    env = rings.make()
    tasks = rings.tasks("train")
    assert {t.task_type for t in tasks} == {"tw-ring_east-hidden", "tw-ring_north-hidden"} and len(tasks) == 6
    for t in tasks:
        side = "east" if "east" in t.task_type else "north"
        first = env.reset(t)
        assert env.walkthrough() == RING_COMMANDS[side]
        assert ring_sign(side) in first
        assert not {"east", "north"} & set(env.goal().lower().replace(".", " ").split())  # the goal does not say
        assert {"go east", "go north"} <= set(env.admissible_actions())
    env.close()


def test_a_hidden_route_stays_hidden_where_the_intro_prints_the_objective_otherwise(session_cache):
    """Seed 143's intro prints the objective with ``you"ve`` for ``you've``: the hidden goal replaces it there too
    (before the fix, 4 of the ring's 300 training tasks and 3 of its 200 panel tasks showed their route, e.g. "First
    off, make an effort to take a trip east", to the router and the executor)."""
    cfg = EnvConfig(challenges=["tw-ring_east", "tw-ring_north"], challenge_settings="route=hidden",
                    train_seeds=[143, 143], max_steps=2)
    fam = TextWorldFamily(cfg, session_cache)
    tasks = fam.tasks("train")
    fam.prepare(tasks, workers=1, progress=False)
    env = fam.make()
    for t in tasks:
        first = env.reset(t)
        intro = first.split("\n\n")[0]
        assert first.startswith(env.goal()) and intro == env.goal(), intro
    env.close()


def test_both_headings_win_every_ring_and_only_the_right_one_in_two_actions(rings):
    env = rings.make()
    for t in rings.tasks("train"):
        right, wrong = ("eastnorth", "northeast") if "east" in t.task_type else ("northeast", "eastnorth")
        loose = {s: play(env, t, s, max_steps=6) for s in (right, wrong)}
        assert loose[right].won and loose[wrong].won  # collection: two winning demonstrations per task
        assert len(loose[right].actions) == 2 and len(loose[wrong].actions) == 4
        assert play(env, t, right, max_steps=2).won and not play(env, t, wrong, max_steps=2).won
        for worded, same in (("eastfirst", "eastnorth"), ("northfirst", "northeast")):  # one-direction texts, same walk
            assert play(env, t, worded, max_steps=6).actions == play(env, t, same, max_steps=6).actions
    env.close()


def test_the_first_heading_texts_name_one_direction_each():
    """The heading texts of a ring are the same words in another order; eastfirst/northfirst's differ in words."""
    import re
    from collections import Counter

    from talentrl_core.envs.strategies import get_strategy

    def words(name):
        return Counter(re.findall(r"[a-z]+", get_strategy("textworld", name).description.lower()))

    assert words("eastnorth") == words("northeast")
    assert words("eastfirst") != words("northfirst") and "north" not in words("eastfirst")


def test_collection_plays_its_own_step_budget(tmp_path, session_cache):
    """collect.max_steps replaces env.max_steps in collection only (evaluation and RL keep the env's budget)."""
    from pipeline.config import load_config
    from talentrl_core.stages import collect_settings, rollout_settings

    cfg = load_config(["experiment=ring", f"artifacts_dir={tmp_path}", "tracker.mode=disabled"])
    assert collect_settings(cfg, "c").max_steps == 6 and rollout_settings(cfg, "e", "eval").max_steps == 2
    assert cfg.sft.demonstrator_habit == {"eastnorth": 2} and cfg.collect.strategies == ["eastnorth", "northeast"]

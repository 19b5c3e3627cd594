"""TextWorld generated-games family: generation, cache, protocol, expert (talentrl_core/envs/textworld/).

Games are generated into the session cache (a few seconds each on 2 cores), so the whole file reuses
three coin-collector games: eval seeds 100001 and 100002 at level=5, plus one regenerated elsewhere to
check reproducibility.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("textworld")

from talentrl_core.config import EnvConfig  # noqa: E402
from talentrl_core.envs.base import Env, Task  # noqa: E402
from talentrl_core.envs.textworld import games as tw  # noqa: E402
from talentrl_core.envs.textworld.env import TextWorldEnv  # noqa: E402
from talentrl_core.envs.textworld.family import TextWorldFamily  # noqa: E402
from talentrl_core.envs.textworld.settings import GameSpec  # noqa: E402


def _cfg(**kw) -> EnvConfig:
    base = dict(
        challenges=["tw-coin_collector"], challenge_settings="level=5", train_seeds=[1, 10], eval_seeds=[100001, 100002]
    )
    base.update(kw)
    return EnvConfig(**base)


@pytest.fixture(scope="module")
def family(session_cache) -> TextWorldFamily:
    return TextWorldFamily(_cfg(), session_cache)


@pytest.fixture(scope="module")
def eval_tasks(family) -> list[Task]:
    tasks = family.tasks("eval")
    family.prepare(tasks, workers=2, progress=False)  # exercises the process pool once
    return tasks


def test_task_listing_is_deterministic_and_portable(session_cache, tmp_path):
    a = TextWorldFamily(_cfg(challenges=["tw-coin_collector", "tw-treasure_hunter"]), session_cache)
    b = TextWorldFamily(_cfg(challenges=["tw-coin_collector", "tw-treasure_hunter"]), tmp_path)
    ta, tb = a.tasks("train"), b.tasks("train")
    assert [t.task_id for t in ta] == [t.task_id for t in tb]  # ids do not depend on the cache folder
    assert len(ta) == 20 and ta[0].key == "tw-coin_collector/level=5/1" and ta[-1].key == "tw-treasure_hunter/level=5/10"
    assert {t.task_type for t in ta} == {"tw-coin_collector", "tw-treasure_hunter"}
    assert all(str(session_cache) not in t.key and not t.key.startswith("/") for t in ta)
    assert len({t.task_id for t in ta}) == 20
    assert [t.key for t in a.tasks("eval")] == ["tw-coin_collector/level=5/100001", "tw-coin_collector/level=5/100002",
                                               "tw-treasure_hunter/level=5/100001", "tw-treasure_hunter/level=5/100002"]
    # seeded subset: same seed same subset, listing order kept
    s1, s2, s3 = a.tasks("train", n=5, seed=3), a.tasks("train", n=5, seed=3), a.tasks("train", n=5, seed=4)
    assert [t.key for t in s1] == [t.key for t in s2] != [t.key for t in s3]
    assert [t.key for t in s1] == [t.key for t in ta if t in s1]
    assert Task.from_json(ta[0].to_json()) == ta[0]
    with pytest.raises(ValueError):
        a.tasks("valid_seen")
    assert a.task_types() == ["tw-coin_collector", "tw-treasure_hunter"]


def test_settings_parsing():
    assert tw.canonical_settings("recipe=1,take=1,go=6") == "go=6,recipe=1,take=1"
    assert tw.canonical_settings("take=1, recipe=1 ,go=6") == "go=6,recipe=1,take=1"
    assert tw.canonical_settings("cook,open=true,cut=false") == "cook=1,open=1"
    s = tw.parse_settings("tw-cooking", "recipe=1,take=1,go=6,cook")
    assert (s["recipe"], s["take"], s["go"], s["cook"], s["open"]) == (1, 1, 6, True, False)
    assert tw.parse_settings("tw-coin_collector", "level=5")["level"] == 5
    with pytest.raises(ValueError, match="tw-coin_collector"):
        tw.parse_settings("tw-coin_collector", "")  # level is required
    with pytest.raises(ValueError, match="go"):
        tw.parse_settings("tw-cooking", "go=7")  # not one of 1, 6, 9, 12
    with pytest.raises(ValueError):
        TextWorldFamily(_cfg(challenges=["tw-nope"]), "/tmp/x")
    with pytest.raises(ValueError):
        tw.canonical_settings("level=5/../..")
    assert GameSpec.from_key("tw-cooking/take=1,recipe=1/7") == GameSpec("tw-cooking", "recipe=1,take=1", 7)


def test_generation_is_reproducible_and_leaves_home_alone(family, eval_tasks, tmp_path):
    task = eval_tasks[0]
    env_a = family.make()
    obs_a = env_a.reset(task)
    walk_a = env_a.walkthrough()
    # The same seed generated again, into another cache, after other games were generated in this process.
    env_b = TextWorldEnv(tmp_path / "other-cache")
    obs_b = env_b.reset(task)
    assert obs_a == obs_b and walk_a == env_b.walkthrough() and env_a.goal() == env_b.goal()
    assert len(walk_a) >= 2 and walk_a[-1] == "take coin"
    assert "$$" not in obs_a and env_a.goal() in " ".join(obs_a.split())  # banner removed, goal shown
    # A different seed is a different game.
    env_c = family.make()
    assert env_c.reset(eval_tasks[1]) != obs_a or env_c.walkthrough() != walk_a
    for e in (env_a, env_b, env_c):
        e.close()
    # Inform7 wrote its ~/Inform under a scratch HOME that was removed, not under ours.
    assert not (Path(os.environ["HOME"]) / "Inform").exists()
    assert not list((tmp_path / "other-cache").rglob("*.tmp"))  # no temp folders left behind


def test_memoised_knowledge_base_gives_byte_identical_games(tmp_path, monkeypatch):
    """Generation parses each challenge's knowledge base once per process; the game must not change."""
    import contextlib

    spec = GameSpec("tw-treasure_hunter", "level=5", 7)
    memo = tw.generate_game(tmp_path / "memo", spec)
    assert tw._KB_CACHE  # the parsed knowledge base was kept for the next game
    monkeypatch.setattr(tw, "_memoised_knowledge_base", contextlib.nullcontext)
    plain = tw.generate_game(tmp_path / "plain", spec)
    assert memo.read_bytes() == plain.read_bytes()
    assert memo.with_suffix(".json").read_bytes() == plain.with_suffix(".json").read_bytes()
    from textworld.generator.data import KnowledgeBase

    assert KnowledgeBase.load.__func__.__name__ == "load" and "_memoised" not in KnowledgeBase.load.__qualname__


@pytest.mark.parametrize("challenge,settings", [("tw-coin_collector", "level=104"), ("tw-simple", "rewards=dense,goal=detailed")])
def test_walkthrough_without_its_compile_gives_byte_identical_games(challenge, settings, tmp_path, monkeypatch):
    """Coin collector and simple games record their walkthrough without TextWorld's throw-away compile."""
    import contextlib

    from textworld.generator.maker import GameMaker

    played, in_python = [], tw._set_walkthrough_in_python

    def recorded(maker, commands):
        played.append(in_python(maker, commands))
        return played[-1]

    monkeypatch.setattr(tw, "_set_walkthrough_in_python", recorded)
    original = GameMaker.set_walkthrough
    spec = GameSpec(challenge, settings, 11)
    fast = tw.generate_game(tmp_path / "fast", spec)
    assert played == [True]  # the walkthrough was played by the tracker, not by the fallback
    assert GameMaker.set_walkthrough is original  # the patch is undone after generation
    monkeypatch.setattr(tw, "_walkthrough_without_compile", contextlib.nullcontext)
    plain = tw.generate_game(tmp_path / "plain", spec)
    assert fast.read_bytes() == plain.read_bytes()
    assert fast.with_suffix(".json").read_bytes() == plain.with_suffix(".json").read_bytes()


def test_cache_is_reused(family, eval_tasks, monkeypatch):
    task = eval_tasks[1]
    game = family.game_file(task)
    assert game.is_file() and game.with_suffix(".json").is_file()
    assert game.relative_to(family.cache_dir).as_posix() == "textworld/tw-coin_collector/level=5/100002.z8"
    before = (game.stat().st_mtime_ns, game.with_suffix(".json").stat().st_mtime_ns)

    import textworld.generator

    def _no_compile(*a, **k):
        raise AssertionError("a cached game was compiled again")

    monkeypatch.setattr(textworld.generator, "compile_game", _no_compile)
    env = family.make()
    env.reset(task)
    env.close()
    env = family.make()
    env.reset(task)
    env.reset(task)
    env.close()
    assert family.prepare(eval_tasks, workers=2, progress=False) == {}
    assert (game.stat().st_mtime_ns, game.with_suffix(".json").stat().st_mtime_ns) == before


def test_expert_wins_through_the_protocol(family, eval_tasks):
    env = family.make()
    assert isinstance(env, Env)
    for task in eval_tasks:
        obs = env.reset(task)
        assert obs and env.goal()
        total, steps, res = 0.0, 0, None
        while steps < 50:
            acts = env.admissible_actions()
            assert acts == sorted(acts) and acts
            action = env.expert_action()
            assert action in acts
            res = env.step(action)
            assert res.info["valid"] is True
            total += res.reward
            steps += 1
            if res.done:
                break
        assert res is not None and res.done and res.won and not res.info["lost"]
        assert total == pytest.approx(1.0)  # rewards sum to the normalised final score
        assert env.expert_action() is None
        after = env.step("look")  # stepping a finished game is harmless
        assert after.done and after.reward == 0.0
    env.close()


def test_expert_recovers_after_the_agent_deviates(family, eval_tasks):
    env = family.make()
    env.reset(eval_tasks[0])
    walk = env.walkthrough()
    first = env.expert_action()
    env.step(first)
    # Go back where we came from: the walkthrough is now stale, the policy must re-plan.
    back = {"go north": "go south", "go south": "go north", "go east": "go west", "go west": "go east"}[first]
    assert back in env.admissible_actions()
    r = env.step(back)
    assert r.info["valid"] and not r.done
    assert env.expert_action() == first  # re-planned from the agent's actual position
    steps = 0
    while not r.done and steps < 30:
        r = env.step(env.expert_action())
        steps += 1
    assert r.won and steps == len(walk)
    env.close()


def test_inadmissible_action_is_reported_not_raised(family, eval_tasks):
    env = family.make()
    env.reset(eval_tasks[0])
    expert = env.expert_action()
    for bad in ["dance wildly", "", "take the moon", "go west\ngo north\ngo east"]:
        r = env.step(bad)
        assert r.info["valid"] is False and r.reward == 0.0 and not r.done
        assert isinstance(r.observation, str)
    # A multi-line action reached the game as one line: the player has not moved three rooms.
    assert env.expert_action() == expert
    # Case and spacing do not make an admissible command invalid.
    r = env.step("  " + env.expert_action().upper() + " ")
    assert r.info["valid"] is True
    env.close()


def test_two_envs_interleave_independently(family, eval_tasks):
    a, b = family.make(), family.make()
    oa, ob = a.reset(eval_tasks[0]), b.reset(eval_tasks[1])
    wa, wb = a.walkthrough(), b.walkthrough()
    ra = rb = None
    for i in range(max(len(wa), len(wb))):
        if i < len(wa):
            ra = a.step(wa[i])
        if i < len(wb):
            rb = b.step(wb[i])
    assert ra.won and rb.won
    assert a.reset(eval_tasks[0]) == oa and b.reset(eval_tasks[1]) == ob  # reset returns to the same start
    a.close()
    b.close()


def test_cli_check_on_cached_games(family, eval_tasks, capsys):
    rc = tw.main(["--check", "--challenge", "tw-coin_collector", "--settings", "level=5", "--seeds", "100001", "100002",
                  "--workers", "1", "--cache-dir", str(family.cache_dir)])
    out = capsys.readouterr().out
    assert rc == 0 and "expert wins 2/2" in out


def test_walkthrough_fallback_when_textworld_has_no_policy(session_cache):
    # tw-cooking with `drop` has no policy_commands in TextWorld 1.7: the expert replays the walkthrough.
    fam = TextWorldFamily(_cfg(challenges=["tw-cooking"], challenge_settings="recipe=1,take=1,go=1,drop",
                               eval_seeds=[1, 1]), session_cache)
    (task,) = fam.tasks("eval")
    assert task.key == "tw-cooking/drop=1,go=1,recipe=1,take=1/1"
    env = fam.make()
    env.reset(task)
    walk = env.walkthrough()
    r, total = None, 0.0
    for _ in range(len(walk) + 1):
        a = env.expert_action()
        if a is None:
            break
        r = env.step(a)
        total += r.reward
    assert r is not None and r.won and total == pytest.approx(1.0)
    env.reset(task)
    off = next(c for c in env.admissible_actions() if c != walk[0])
    env.step(off)  # off the walkthrough: no expert any more
    assert env.expert_action() is None
    env.close()

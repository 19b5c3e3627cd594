"""Envs in worker processes (``env.workers``, ``talentrl_core.env_pool``): same episodes as in-process, crash and hang
isolation per worker (a dead worker ends its episode, never the run, and is replaced)."""

import functools
import os
import signal
import time

import pytest

from talentrl_core.config import EnvConfig
from talentrl_core.env_pool import EnvPool, WorkerDied
from talentrl_core.envs.base import StepResult, Task
from talentrl_core.envs.textworld.family import TextWorldFamily
from talentrl_core.policies import ExpertPolicy, RandomPolicy
from talentrl_core.rollout import EpisodeSpec, RolloutSettings, run_episodes


class FakeEnv:
    """Three steps to win; on ``bad_key`` it dies (``exit``: os._exit, ``kill``: SIGKILL itself) or hangs at ``at_step``."""

    name = "textworld"

    def __init__(self, bad_key="", how="exit", at_step=2):
        self.bad_key, self.how, self.at_step, self.key, self.n = bad_key, how, at_step, "", 0

    def reset(self, task):
        self.key, self.n = task.key, 0
        return f"start {task.key} pid-independent"

    def goal(self):
        return f"win {self.key}"

    def step(self, action):
        self.n += 1
        if self.key == self.bad_key and self.n == self.at_step:
            if self.how == "exit":
                os._exit(3)
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # hang
        won = self.n >= 3
        return StepResult(f"{self.key} after {action} #{self.n}", 1.0 if won else 0.0, won, won, {"valid": True})

    def admissible_actions(self):
        return ["go north", "go south"]

    def expert_action(self):
        return "go north"

    def close(self):
        pass


def _tasks(n):
    return [Task("textworld", "train", "fake", f"k{i}") for i in range(n)]


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_crashed_worker_ends_one_episode_not_the_run(how):
    specs = [EpisodeSpec(t, seed=i) for i, t in enumerate(_tasks(6))]
    settings = RolloutSettings(max_steps=5, step_timeout_s=20, env_workers=3)
    trajs = run_episodes(functools.partial(FakeEnv, "k1", how), specs, ExpertPolicy(), settings, batch_size=3, progress=False)
    assert [t.task_id for t in trajs] == [s.task.task_id for s in specs]
    failed = [t for t in trajs if t.error]
    assert len(failed) == 1 and failed[0].task_id == specs[1].task.task_id and not failed[0].success
    assert "WorkerDied" in failed[0].error, failed[0].error
    assert all(t.success and t.n_steps == 3 for t in trajs if not t.error)  # later episodes ran on the replaced worker


def test_hung_worker_is_killed_and_replaced():
    specs = [EpisodeSpec(t, seed=i) for i, t in enumerate(_tasks(4))]
    # 10 s, not less: a replaced worker starts a fresh process whose first reset counts against the same limit, and
    # on a loaded 2-core machine that start alone took over 3 s (a healthy episode then failed as "exceeded")
    settings = RolloutSettings(max_steps=5, step_timeout_s=10, env_workers=2)
    t0 = time.perf_counter()
    trajs = run_episodes(functools.partial(FakeEnv, "k0", "hang"), specs, ExpertPolicy(), settings, batch_size=2, progress=False)
    assert time.perf_counter() - t0 < 90  # the hang is cut, not waited out
    assert "exceeded" in trajs[0].error and not trajs[0].success
    assert all(t.success for t in trajs[1:]), [t.error for t in trajs]


def test_pool_replaces_dead_worker_and_reports_env_errors():
    with EnvPool(functools.partial(FakeEnv, "k0", "exit", 1), workers=1, timeout_s=20) as pool:
        env = pool.make()
        assert env.name == "textworld"
        with pytest.raises(AttributeError):  # an env's own error crosses the pipe, the worker lives on
            env.call("no_such_method")
        env.reset(Task("textworld", "train", "fake", "k0"))
        with pytest.raises(WorkerDied):
            env.step("go north")
        fresh = pool.make()  # on a new process
        assert fresh.reset(Task("textworld", "train", "fake", "k5")).startswith("start k5")
        assert fresh.step("go north").observation == "k5 after go north #1"
        assert pool.restarts == 1


@pytest.fixture(scope="module")
def family(session_cache):
    fam = TextWorldFamily(EnvConfig(challenges=["tw-coin_collector"], challenge_settings="level=5", train_seeds=[1, 6]), session_cache)
    fam.prepare(fam.tasks("train"), workers=2, progress=False)
    return fam


def _view(trajs):
    return [(t.task_id, [(s.action, s.observation, s.reward, s.valid) for s in t.steps], t.success, t.final_reward, t.error)
            for t in trajs]


@pytest.mark.parametrize("policy", ["random", "expert"])
def test_pool_plays_the_same_episodes_as_in_process(family, policy):
    specs = [EpisodeSpec(t, seed=i) for i, t in enumerate(family.tasks("train"))]
    settings = RolloutSettings(max_steps=6)
    pol = (lambda: RandomPolicy(0)) if policy == "random" else ExpertPolicy
    local = run_episodes(family.make, specs, pol(), settings, batch_size=4, progress=False)
    pooled = run_episodes(family.make, specs, pol(), RolloutSettings(max_steps=6, env_workers=2), batch_size=4, progress=False)
    assert _view(pooled) == _view(local)
    assert all(not t.error for t in pooled)


def test_env_workers_setting():
    assert EnvConfig().workers == 0
    assert RolloutSettings.of(EnvConfig(workers=2)).env_workers == 2
    with pytest.raises(ValueError, match="env.workers"):
        EnvConfig(workers=-1)


@pytest.fixture(scope="module")
def alfworld(shared_data, session_cache):
    from talentrl_core.envs.alfworld import AlfworldFamily

    fam = AlfworldFamily(EnvConfig(name="alfworld", max_steps=12,
                                   alfworld_archive=str(shared_data / "alfworld" / "json_2.1.1_all.tar.xz")), session_cache)
    return fam, fam.tasks("valid_seen", 2, 0)


def test_lazy_handcoded_expert_gives_the_eager_plans(alfworld):
    """The handcoded expert runs only when asked, yet after random detours it answers what the per-step one does."""
    import random

    from talentrl_core.envs.alfworld.env import AlfworldEnv

    fam, tasks = alfworld
    lazy, eager = fam.make(), AlfworldEnv(fam.root, expert="handcoded", max_steps=12, lazy_expert=False)
    assert lazy.lazy_expert
    try:
        for task in tasks:
            rng = random.Random(task.key)
            assert lazy.reset(task) == eager.reset(task)
            for i in range(10):
                acts = lazy.admissible_actions()
                assert acts == eager.admissible_actions()
                a = rng.choice(acts) if i % 3 else lazy.expert_action()  # ask only every third step
                if i % 3 == 0:
                    assert a == eager.expert_action()
                if a is None or lazy.step(a).done | eager.step(a).done:
                    break
            assert lazy.expert_action() == eager.expert_action() and lazy.expert_error == eager.expert_error
    finally:
        lazy.close()
        eager.close()


def test_alfworld_pool_plays_the_same_episodes(alfworld):
    fam, tasks = alfworld
    specs = [EpisodeSpec(t, seed=i) for i, t in enumerate(tasks)]
    settings = RolloutSettings(max_steps=8, step_timeout_s=120)
    local = run_episodes(fam.make, specs, RandomPolicy(1), settings, batch_size=2, progress=False)
    pooled = run_episodes(fam.make, specs, RandomPolicy(1), RolloutSettings(max_steps=8, step_timeout_s=120, env_workers=2),
                          batch_size=2, progress=False)
    assert _view(pooled) == _view(local) and not any(t.error for t in pooled)

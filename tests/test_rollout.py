"""The batched rollout loop on real TextWorld games: crash isolation, timeouts, invalid actions, Parquet I/O."""

import time

import pyarrow.parquet as pq
import pytest

from talentrl_core.config import EnvConfig
from talentrl_core.envs.textworld.family import TextWorldFamily
from talentrl_core.policies import ExpertPolicy, RandomPolicy
from talentrl_core.rollout import EpisodeSpec, RolloutSettings, run_episodes
from talentrl_core.trajectories import TrajectoryFileError, read_trajectories, write_trajectories


@pytest.fixture(scope="module")
def family(session_cache):
    fam = TextWorldFamily(EnvConfig(challenges=["tw-coin_collector"], challenge_settings="level=5", train_seeds=[1, 8]), session_cache)
    fam.prepare(fam.tasks("train"), workers=2, progress=False)
    return fam


class CrashingEnv:
    """A real TextWorld env that raises on its second step for one task (a deliberately broken env)."""

    def __init__(self, inner, crash_key, hang=False):
        self.inner, self.crash_key, self.hang, self.n = inner, crash_key, hang, 0
        self.name = inner.name

    def reset(self, task):
        self.key, self.n = task.key, 0
        return self.inner.reset(task)

    def step(self, action):
        self.n += 1
        if self.key == self.crash_key and self.n == 2:
            if self.hang:
                time.sleep(5)
            raise RuntimeError("simulated engine crash")
        return self.inner.step(action)

    def __getattr__(self, item):
        return getattr(self.inner, item)


@pytest.mark.parametrize("hang", [False, True])
def test_crashing_env_fails_one_episode_not_the_batch(family, hang):
    tasks = family.tasks("train")
    assert len(tasks) == 8
    bad = tasks[3].key
    settings = RolloutSettings(max_steps=20, step_timeout_s=1.0 if hang else 30.0, run_id="t")
    trajs = run_episodes(lambda: CrashingEnv(family.make(), bad, hang), [EpisodeSpec(t) for t in tasks], ExpertPolicy(), settings, batch_size=8, progress=False)
    assert len(trajs) == 8
    failed = [t for t in trajs if t.error]
    assert [t.task_id for t in failed] == [tasks[3].task_id]
    assert ("exceeded" in failed[0].error) if hang else ("simulated engine crash" in failed[0].error)
    assert sum(t.success for t in trajs) == 7


class ResetCrashingEnv(CrashingEnv):
    """A real TextWorld env that raises on reset for one task."""

    def reset(self, task):
        if task.key == self.crash_key:
            raise RuntimeError("simulated crash on reset")
        return super().reset(task)


def test_env_crashing_on_reset_is_an_error_in_metrics_and_fails_the_gate(family):
    """The evaluation path end to end: the crashed episode is a failure with its error counted, the panel keeps one
    trajectory per task, and the blocking asset check fails when errors exceed the allowed share."""
    from assets.checks import error_gate
    from talentrl_core.evaluation.metrics import build_metrics
    from talentrl_core.evaluation.runner import check_one_per_task, episode_result

    tasks = family.tasks("train")
    trajs = run_episodes(lambda: ResetCrashingEnv(family.make(), tasks[5].key), [EpisodeSpec(t) for t in tasks],
                         ExpertPolicy(), RolloutSettings(max_steps=20, run_id="t"), batch_size=8, progress=False)
    check_one_per_task(trajs, tasks, "expert", "textworld")
    crashed = [t for t in trajs if t.error]
    assert [t.task_id for t in crashed] == [tasks[5].task_id] and "simulated crash on reset" in crashed[0].error
    m = build_metrics([episode_result("expert", "textworld", t, None, 0) for t in trajs])
    cell = m["systems"]["expert"]["textworld"]
    assert cell["errors"] == 1 and cell["success"] == pytest.approx(7 / 8)
    passed, meta = error_gate(m, 0.05)
    assert not passed and meta["failures"] == ["expert on textworld: 1 of 8 episodes ended in an environment error"]
    assert error_gate(m, 0.2)[0]


def test_unparseable_completion_is_an_invalid_action(family):
    class Babbler:
        name = "babbler"

        def complete(self, items):
            from talentrl_core.generation import GenResult

            return [GenResult("I would go north", [], 0) for _ in items]

    trajs = run_episodes(family.make, [EpisodeSpec(family.tasks("train")[0])], Babbler(), RolloutSettings(max_steps=3, invalid_penalty=-0.1), progress=False)
    t = trajs[0]
    assert t.n_steps == 3 and t.n_invalid == 3 and not t.success and t.error is None
    assert all(s.reward == pytest.approx(-0.1) and "Invalid action" in s.observation for s in t.steps)


def test_batched_equals_sequential_for_seeded_random_policy(family):
    tasks = family.tasks("train")[:4]
    specs = [EpisodeSpec(t, seed=i) for i, t in enumerate(tasks)]
    s = RolloutSettings(max_steps=6)
    a = run_episodes(family.make, specs, RandomPolicy(0), s, batch_size=1, progress=False)
    assert all(t.n_steps >= 1 for t in a)
    exp = run_episodes(family.make, specs, ExpertPolicy(), s, batch_size=4, progress=False)
    assert all(t.success for t in exp)


def test_parquet_round_trip_and_corrupt_file_named(family, tmp_path):
    trajs = run_episodes(family.make, [EpisodeSpec(t) for t in family.tasks("train")[:2]], ExpertPolicy(), RolloutSettings(), progress=False)
    files = write_trajectories(trajs, tmp_path, "run1")
    back = read_trajectories(tmp_path)
    assert [t.to_row() for t in back] == [t.to_row() for t in trajs]
    assert pq.read_schema(files[0]).metadata[b"talentrl.schema"] == b"trajectories/2"
    bad = tmp_path / "env=textworld" / "broken.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(TrajectoryFileError, match="broken.parquet"):
        read_trajectories(tmp_path)
    foreign = tmp_path / "foreign.parquet"
    import pyarrow as pa

    pq.write_table(pa.table({"x": [1]}), foreign)
    with pytest.raises(TrajectoryFileError, match="foreign.parquet.*not a TalentRL"):
        read_trajectories(foreign)


def test_parallel_workers_keep_spec_order_and_one_bar_counts_all_of_them(family, capsys):
    import talentrl_core.rollout as rollout

    tasks = family.tasks("train")
    specs = [EpisodeSpec(t) for t in tasks]
    trajs = rollout.run_episodes_parallel(family.make, specs, lambda i: ExpertPolicy(), RolloutSettings(max_steps=20),
                                          workers=2, progress=True)
    assert [t.task_id for t in trajs] == [t.task_id for t in tasks] and all(t.success for t in trajs)
    assert rollout._EPISODES_DONE.value == len(tasks)
    err = capsys.readouterr().err
    assert f"{len(tasks)}/{len(tasks)}" in err and "x2]" in err  # the bar's final state: all workers' episodes

"""The talent probe (``pipeline.talent_probe``): does the executor follow its talent, read before any rollout."""

from __future__ import annotations

import math

from talentrl_core.evaluation.talent_probe import contrasting_tasks, probe, summary
from talentrl_core.prompts import TalentView
from talentrl_core.rollout import SkillContext
from talentrl_core.trajectories import Step, Trajectory


def _traj(task: str, task_type: str, strategy: str, first: str, success: bool = True, obs: str = "a room",
          admissible=("go east", "go north")) -> Trajectory:
    return Trajectory("r", "textworld", "train", task, task_type, "{}", goal="Find the coin.", initial_observation=obs,
                      strategy=strategy, success=success,
                      steps=[Step("", "", first, "next room", 0.0, True, admissible=list(admissible))])


def test_only_tasks_whose_strategies_start_differently_are_probed_at_most_per_type():
    trajs = [_traj("a", "east", "e", "go east"), _traj("a", "east", "n", "go north"),
             _traj("b", "east", "e", "go east"), _traj("b", "east", "n", "go east"),   # same first command: no contrast
             _traj("c", "east", "e", "go east"), _traj("c", "east", "n", "go north", success=False),  # one winner only
             _traj("d", "east", "e", "go east"), _traj("d", "east", "n", "go north"),
             _traj("f", "north", "e", "go east"), _traj("f", "north", "n", "go north")]
    got = contrasting_tasks(trajs, per_type=1)
    assert [(r["task"].task_id, r["first"]) for r in got] == [("a", {"e": "go east", "n": "go north"}),
                                                              ("f", {"e": "go east", "n": "go north"})]
    assert [r["task"].task_id for r in contrasting_tasks(trajs, per_type=5)] == ["a", "d", "f"]


def test_effect_is_one_for_an_obedient_executor_and_zero_for_one_that_ignores_its_talent():
    obey = [{"task_type": "x", "talent_of": s, "p": {"e": float(s == "e"), "n": float(s == "n")}} for s in ("e", "n")]
    ignore = [{"task_type": "x", "talent_of": s, "p": {"e": 0.9, "n": 0.1}} for s in ("e", "n")]
    assert summary(obey)["effect"] == 1.0 and summary(obey)["follows"] == 1.0
    assert summary(ignore)["effect"] == 0.0 and summary(ignore)["follows"] == 0.5  # a marginal, whatever its bias
    assert summary(ignore)["by_type"]["x"]["n"] == 2


class _Talents:
    """A library view with two talents and no skills (the probe reads ``context`` only)."""

    def __init__(self):
        self.views = {tid: TalentView(tid, name, "", strategy=f"take the {side} exit first")
                      for tid, name, side in (("T-e", "Eastward", "east"), ("T-n", "Northward", "north"))}

    def context(self, env, goal, task_type, talent_id, use_skills=True):
        return SkillContext(self.views[talent_id], [], [])


def test_probabilities_are_the_constrained_policys_own(tmp_path, shared_data):
    """Scored over every admissible first command, each (task, talent)'s probabilities sum to 1: they are the
    distribution constrained decoding samples from, not a likelihood ratio."""
    from talentrl_core.config import ModelConfig
    from talentrl_core.models import build_tiny, load_model

    cfg = ModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=64, vocab_size=600, max_position_embeddings=512, device="cpu")
    model, tok = load_model(build_tiny(cfg, tmp_path / "m", shared_data))
    admissible = ("go east", "go north", "go west", "examine sign", "look")
    task = _traj("a", "east", "e", "go east", admissible=admissible)
    rows = probe(model.eval(), tok, model.config.vocab_size, _Talents(),
                 [{"task": task, "first": {"e": "go east", "n": "go north", "w": "go west", "s": "examine sign"}}],
                 {"e": "T-e", "n": "T-n"}, history=1, obs_chars=200)
    assert [r["talent_of"] for r in rows] == ["e", "n"]
    for r in rows:
        assert math.isclose(sum(r["p"].values()), 1.0, abs_tol=1e-4) and min(r["p"].values()) > 0
    assert rows[0]["p"] != rows[1]["p"]  # the talent's text is in the prompt: a random network's answer moves with it

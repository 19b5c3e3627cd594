"""One RL update's metrics: per-group statistics summed over the step (and processes), then one namespaced dict
(``rollout/…``, ``route/…``, ``rl/…``, ``perf/…``) as cleanrl and TRL log them."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..trajectories import Trajectory
from .advantages import matched_divergence
from .routing import Group, menu_stats, route_metrics


def new_step_stats(n_arms: int) -> dict[str, float]:
    """The step's running sums, before any group."""
    st: dict[str, float] = {"groups": 0, "groups_zero_var": 0, "groups_kept": 0, "route_abs_sum": 0.0,
                            "exec_abs_sum": 0.0, "exec_abs_n": 0, "entropy_sum": 0.0, "p_first_sum": 0.0,
                            "divergence_sum": 0.0, "groups_tied": 0}
    for k in range(n_arms):
        st[f"arm{k + 1}_reward_sum"] = 0.0
        st[f"arm{k + 1}_n"] = 0
    return st


def add_arm_rewards(st: dict[str, float], rewards: np.ndarray, arms: np.ndarray, n_arms: int) -> None:
    for k in range(n_arms):
        st[f"arm{k + 1}_reward_sum"] += float(rewards[arms == k].sum())
        st[f"arm{k + 1}_n"] += int((arms == k).sum())


def add_group_stats(st: dict[str, float], gr: Group, rewards: np.ndarray, arms: np.ndarray, n_arms: int) -> None:
    """What one group adds to the step's sums: arm rewards, the router's entropy and sampled-talent probability, and
    the matched rollouts' divergence between arms."""
    st["groups"] += 1
    add_arm_rewards(st, rewards, arms, n_arms)
    entropy, p_first = menu_stats(gr)
    st["entropy_sum"] += entropy
    st["p_first_sum"] += p_first
    acts = [[x.action for x in t.env_steps()] for t in gr.trajs]
    st["divergence_sum"] += matched_divergence([[a for a, k in zip(acts, arms) if k == arm] for arm in range(n_arms)])


def rollout_counts(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """What the step's rollouts add to the sums (routing pseudo-steps ``talent:…`` are not env steps)."""
    return {
        "episodes": len(trajs), "reward_sum": sum(t.final_reward for t in trajs), "success": sum(t.success for t in trajs),
        "env_steps": sum(len(t.env_steps()) for t in trajs),
        "invalid": sum(t.n_invalid for t in trajs), "errors": sum(1 for t in trajs if t.error),
        "gen_tokens": sum(s.completion_tokens for t in trajs for s in t.steps),
    }


def step_metrics(tot: dict[str, float], upd: dict[str, float], seconds: tuple[float, float, float], n_arms: int,
                 routed: bool) -> dict[str, float]:
    """The step's dict from the summed statistics ``tot`` and the update's ``upd``; ``seconds`` = (rollout,
    update, whole step)."""
    t_roll, t_upd, t_step = seconds
    n_ep, n_g = max(tot["episodes"], 1), max(tot["groups"], 1)
    m = {
        "rollout/reward": tot["reward_sum"] / n_ep,
        "rollout/success": tot["success"] / n_ep,
        "rollout/episode_len": tot["env_steps"] / n_ep,
        "rollout/invalid_share": tot["invalid"] / max(tot["env_steps"], 1),
        "rollout/errors": tot["errors"],
        "rl/groups_kept": tot["groups_kept"],
        "rl/groups_zero_var": tot["groups_zero_var"],
        "rl/adv_exec_abs": tot["exec_abs_sum"] / max(tot["exec_abs_n"], 1),
        "perf/rollout_s": t_roll,
        "perf/update_s": t_upd,
        "perf/step_s": t_step,
        "perf/env_steps_per_s": tot["env_steps"] / max(t_roll, 1e-9),
        "perf/gen_tokens_per_s": tot["gen_tokens"] / max(t_roll, 1e-9),
        "perf/tokens_per_s": upd.pop("perf/update_tokens") * 1.0 / max(t_upd, 1e-9),
    }
    for k in range(n_arms):
        m[f"rollout/reward_arm{k + 1}"] = tot[f"arm{k + 1}_reward_sum"] / max(tot[f"arm{k + 1}_n"], 1)
    if routed:
        m.update(route_metrics(tot, n_g))
    m.update(upd)
    return m

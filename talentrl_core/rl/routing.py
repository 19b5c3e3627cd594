"""Routing RL: the talent arms of each task and the contrast that credits the routing choice (DESIGN.md §4–§5).

1. **Read the router.** For every task the policy's routing distribution over the talent menu is computed exactly:
   each ``<talent>ID</talent>`` + eos is scored with teacher forcing under the menu's constrained mask and the sampling
   temperature (``menu_candidates`` → ``samples.score_completions``).
2. **Intervene.** Arm 1 is a talent drawn from that distribution with a seeded generator, arms 2..M the next most
   likely talents, optionally a no-talent arm last (``choose_arms``). Rollout ``j`` of every arm samples with the same
   seed (matched interventions: the arms differ only by the talent).
3. **Contrast.** Each arm's routing sample gets ``A_route(k)``, its arm's mean reward against the other arms'
   (``routing_contrast``; ``advantages.routing_advantages`` has the formula), and enters the loss weighted by
   ``rl.alpha_route`` (``update.py``).

Departures from DESIGN.md §5: arms 2..M are the next most likely talents (the "uniform" alternative is not
implemented); the no-talent arm has no routing sample, its mean reward still enters the contrast as a baseline. The
routing sample is not produced by the rollout loop's generator: a seeded draw from the exactly scored constrained
distribution *is* a sample of the constrained policy, and its old log-probs are those scores.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from ..envs.base import Task
from ..prompts import RoutingCue, routing_completions, routing_prompt
from ..rollout import EpisodeSpec, Knowledge
from ..trajectories import Trajectory
from .advantages import routing_advantages
from .samples import Sample, chat_prompt_ids, completion_ids_of
from .seeding import derive_seed


@dataclass
class Group:
    """One task of a step: its arms (talent interventions), their routing samples and rollouts."""

    index: int
    "Global index of the task within the step (seeds derive from it, so sharding never changes them)."
    task: Task
    talents: list[Optional[str]] = field(default_factory=list)
    "Talent of each arm (None: no talent)."
    seeds: list[int] = field(default_factory=list)
    "Seed of rollout j, shared by every arm."
    goal: str = ""
    menu_ids: list[str] = field(default_factory=list)
    menu_probs: list[float] = field(default_factory=list)
    "The policy's routing distribution over the menu."
    route_samples: list[Optional[Sample]] = field(default_factory=list)
    "Routing sample of each arm (None for the no-talent arm and in the flat baseline)."
    trajs: list[Trajectory] = field(default_factory=list)
    "Arm-major: rollout j of arm k at k * (G/M) + j."
    cue_tokens: list[int] = field(default_factory=list)
    "Per routing candidate (cue-major, then menu order): the tokens of its restated cue (``env.routing_cue``; 0 without)."
    specs: list[EpisodeSpec] = field(default_factory=list)

    @property
    def arm_of(self) -> list[int]:
        n = len(self.trajs) // max(len(self.talents), 1)
        return [i // n for i in range(len(self.trajs))]


def plan_groups(seed: int, step: int, tasks: Sequence[tuple[int, Task]], per_arm: int) -> list[Group]:
    """One group per (global index, task) with the rollout seeds every arm shares."""
    groups = []
    for g, task in tasks:
        base = derive_seed(seed, "rollout", step, g) % 2**40
        groups.append(Group(g, task, seeds=[base + j for j in range(per_arm)]))
    return groups


def menu_candidates(groups: Sequence[Group], knowledge: Knowledge, tok, keep: Optional[int],
                    goal_of: Callable[[Task], tuple[str, str]], obs_chars: int, n_talent_arms: int,
                    n_arms_setting: str, cue: Optional[RoutingCue] = None) -> list[Sample]:
    """Every routing completion of each task to score, group by group: each menu talent in menu order, behind each
    restated cue (cue-major) where the router restates one; fills ``goal``, ``menu_ids`` and ``cue_tokens``.
    ``goal_of(task)`` = (goal, first observation); ``n_arms_setting`` names the settings in the error when the menu is
    too short."""
    candidates: list[Sample] = []
    cue_lens: dict[str, int] = {}  # the same menus recur in every group: tokenise each completion once
    for gr in groups:
        gr.goal, first = goal_of(gr.task)
        menu = knowledge.menu(gr.task.env)
        if len(menu) < n_talent_arms:
            raise ValueError(
                f"env {gr.task.env}: the talent menu has {len(menu)} talents but {n_talent_arms} talent arms are "
                f"needed ({n_arms_setting}); lower rl.n_arms or train the flat baseline (rl.flat_baseline=true)")
        gr.menu_ids = [t.talent_id for t in menu]
        prompt = chat_prompt_ids(tok, routing_prompt(gr.task.env, gr.goal, first, menu, obs_chars), keep)
        allowed = routing_completions([t.shown for t in menu], cue)
        if cue is not None:
            cue_lens.update({text: cue_token_count(tok, text) for text in allowed if text not in cue_lens})
        gr.cue_tokens = [cue_lens.get(text, 0) for text in allowed]
        candidates.extend(Sample("route", prompt, completion_ids_of(tok, text), [], allowed, gr.index) for text in allowed)
    return candidates


def cue_token_count(tok, completion: str) -> int:
    """Tokens of the restated cue at the start of a routing completion's ids: RL trains the talent after it, the cue
    held as context. Raises ValueError when the tokenizer merges a token across the cue and the talent."""
    said, talent = RoutingCue.split(completion)
    ids, head = completion_ids_of(tok, completion), completion_ids_of(tok, said)[:-1]
    if ids[:len(head)] != head or ids[len(head):] != completion_ids_of(tok, talent):
        raise ValueError(f"the tokenizer merges the cue and the talent of {completion!r}: RL cannot train the talent "
                         "alone; choose env.routing_cue_values that end on a whole token")
    return len(head)


def choose_arms(groups: Sequence[Group], candidates: Sequence[Sample], scores: Sequence[Sequence[float]], seed: int,
                step: int, n_talent_arms: int, no_talent_arm: bool, sample_all: bool = False) -> None:
    """Each group's arms from its scored routing completions: a seeded draw, then the next most likely talents behind
    the drawn cue (fills ``menu_probs``: the talents' probabilities given that cue, ``talents`` and
    ``route_samples``: the talent's tokens, the restated cue part of their prompt). ``sample_all``
    (``rl.arms=sample``): every arm is a seeded draw, with replacement."""
    pos = 0
    for gr in groups:
        n, k = len(gr.menu_ids), len(gr.cue_tokens) or len(gr.menu_ids)
        cand, sc = candidates[pos:pos + k], scores[pos:pos + k]
        pos += k
        seq = torch.tensor([sum(s) for s in sc], dtype=torch.float64)  # log π(cue, talent) under the decoding mask
        probs = torch.softmax(seq, 0)  # already sums to 1 up to rounding: renormalise
        gen = torch.Generator().manual_seed(derive_seed(seed, "route", step, gr.index) % 2**63)
        if sample_all:
            chosen = torch.multinomial(probs, n_talent_arms, replacement=True, generator=gen).tolist()
        else:
            first = int(torch.multinomial(probs, 1, generator=gen).item())
            behind = first - first % n  # the drawn cue's candidates: arms intervene on the talent only
            rest = sorted((i for i in range(behind, behind + n) if i != first), key=lambda i: (-float(probs[i]), i))
            chosen = [first] + rest[: n_talent_arms - 1]
        behind = chosen[0] - chosen[0] % n
        gr.menu_probs = (probs[behind:behind + n] / probs[behind:behind + n].sum()).tolist()
        gr.talents = [gr.menu_ids[i % n] for i in chosen] + ([None] if no_talent_arm else [])
        gr.route_samples = [talent_sample(cand[i], sc[i], gr.cue_tokens[i] if gr.cue_tokens else 0, n, gr.index, a)
                            for a, i in enumerate(chosen)]
        if no_talent_arm:
            gr.route_samples.append(None)


def talent_sample(cand: Sample, score: Sequence[float], cue_tokens: int, n_talents: int, group: int, arm: int) -> Sample:
    """The routing sample of one arm: its talent's tokens and their log-probs, after the restated cue (``cue_tokens``
    of them, moved into the prompt with the talent-only menu as the decoding mask)."""
    if not cue_tokens:
        return Sample("route", cand.prompt_ids, cand.completion_ids, list(score), cand.allowed, group, arm, -1)
    talents = [RoutingCue.split(a)[1] for a in cand.allowed[:n_talents]]
    return Sample("route", cand.prompt_ids + cand.completion_ids[:cue_tokens], cand.completion_ids[cue_tokens:],
                  list(score)[cue_tokens:], talents, group, arm, -1)


def routing_contrast(rewards: np.ndarray, arms: np.ndarray, n_arms: int, n_talent_arms: int,
                     eps: float) -> tuple[np.ndarray, bool]:
    """``(A_route per arm (M,), tied)``: the arms' reward contrast, and whether a group with talent arms credits
    no routing choice (every contrast 0)."""
    a_route = routing_advantages([rewards[arms == k] for k in range(n_arms)], eps)
    return a_route, bool(n_talent_arms > 0 and not np.any(a_route))


def step_contrasts(kept: Sequence[tuple[Group, np.ndarray, np.ndarray]], n_arms: int, n_talent_arms: int, eps: float,
                   shuffle: bool, seed: int, step: int) -> tuple[dict[int, np.ndarray], int]:
    """(A_route per kept group's index, groups tied) of a step's kept ``(group, rewards, arms)``; with ``shuffle``
    (``rl.shuffle_route_credit``) permuted across the groups."""
    a_routes, tied = {}, 0
    for gr, R, arms in kept:
        a_routes[gr.index], t = routing_contrast(R, arms, n_arms, n_talent_arms, eps)
        tied += int(t)
    return (shuffled(a_routes, seed, step) if shuffle else a_routes), tied


def shuffled(a_routes: dict[int, np.ndarray], seed: int, step: int) -> dict[int, np.ndarray]:
    """The routing advantages of a step's groups, permuted across the groups (``rl.shuffle_route_credit``): each task
    gets another task's contrast (seeded by step). Groups with other arm counts keep their own.

    >>> a = {0: np.array([1.0, -1.0]), 1: np.array([-1.0, 1.0]), 2: np.array([0.0, 0.0])}
    >>> sorted(tuple(v) for v in shuffled(a, 0, 0).values()) == sorted(tuple(v) for v in a.values())
    True
    """
    keys = sorted(a_routes)
    order = list(keys)
    random.Random(derive_seed(seed, "shuffle-route", step)).shuffle(order)
    return {k: a_routes[o] if a_routes[o].shape == a_routes[k].shape else a_routes[k] for k, o in zip(keys, order)}


def routing_samples(gr: Group, alpha_route: float) -> list[Sample]:
    """Copies of the group's routing samples (advantages are set per build), none when routing is not trained."""
    return [dataclasses.replace(s) for s in gr.route_samples if s is not None] if alpha_route > 0 else []


def menu_stats(gr: Group) -> tuple[float, float]:
    """(entropy of the routing distribution in nats, probability of the sampled talent); (0, 0) without a menu."""
    if not gr.menu_probs:
        return 0.0, 0.0
    p = np.asarray(gr.menu_probs)
    return float(-(p * np.log(np.clip(p, 1e-30, 1.0))).sum()), float(p[gr.menu_ids.index(gr.talents[0])])


def route_metrics(tot: dict[str, float], n_groups: float) -> dict[str, float]:
    """``route/*`` of one step from the summed step statistics."""
    m = {
        "route/entropy": tot["entropy_sum"] / n_groups,
        "route/p_sampled": tot["p_first_sum"] / n_groups,
        "route/contrast": tot["route_abs_sum"] / max(tot["groups_kept"], 1),
        # talent sensitivity: matched rollouts whose actions differ between arms; kept groups with no contrast
        "route/divergence": tot["divergence_sum"] / n_groups,
    }
    if tot["groups_kept"]:  # undefined when every group was filtered (absent, not a misleading 0)
        m["route/tied_share"] = tot["groups_tied"] / tot["groups_kept"]
    return m

"""Advantages for contrastive routing RL and group-relative execution RL (DESIGN.md §5).

The formulas are *our specification* (DESIGN.md §5), derived from the TalentRL paper's description; the
paper's exact code is not public and this module does not claim to reproduce it.

One task ``x`` yields one **group** of ``G`` rollouts split into ``M`` **arms** (talent interventions);
every arm starts from the same state and rollout ``j`` of every arm shares sampling seed ``j``.

* ``routing_advantages``   — one advantage per arm, from the contrast of the arms' mean rewards.
* ``execution_advantages`` — one advantage per trajectory, GRPO-style, normalised *within its arm*
  (``exec_group="arm"``, default) so that the talent choice does not leak into execution credit, or
  over the whole group (``exec_group="task"``, an ablation).
* ``zero_variance_mask``   — groups whose rewards are all equal carry no signal (dynamic sampling, DAPO).
* ``matched_divergence``   — a diagnostic: the share of seed-matched rollouts whose actions differ between
  arms. Near 0 means the executor ignores the talent, so no routing contrast can arise.
* ``aem_modulate`` / ``aem_eta`` / ``response_surprisal`` — optional AEM-style surprisal modulation
  (ours; the AEM paper's exact proxy is not public).

Standard deviations are **population** standard deviations (``ddof=0``, divide by ``n``), unlike verl's
and TRL's GRPO which use ``torch.std`` (Bessel-corrected, ``n-1``). With ``ddof=0`` a single-member
group has std 0 and advantage exactly 0 (no contrast, no signal) instead of an undefined value.

Everything here is pure numpy on small arrays (a group is a handful of rollouts); the loss converts to
torch. Nothing here imports a trainer.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

ArrayLike = Union[Sequence[float], np.ndarray]


def _standardise(x: np.ndarray, eps: float) -> np.ndarray:
    """``(x − mean x) / (std x + ε)`` with the population std (``ddof=0``).

    A constant ``x`` gives exactly 0 (its numerator is 0), also with ``ε = 0`` where the formula is 0/0.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return x.copy()
    centred = x - x.mean()
    std = float(np.std(x, ddof=0))
    if std == 0.0:
        return np.zeros_like(x)
    return centred / (std + eps)


def routing_advantages(arm_rewards: Sequence[ArrayLike], eps: float = 1e-6) -> np.ndarray:
    """Routing advantage of each arm: reward contrast under matched intervention (DESIGN.md §5).

        A_route(k) = (R̄_k − mean_k' R̄_k') / (std_k' R̄_k' + ε)

    where ``R̄_k`` is the mean reward of arm ``k``'s rollouts and the std is the *population* std over
    the ``M`` arm means. Arms may hold different numbers of rollouts (each is averaged first, so a
    larger arm does not weigh more). The result goes to the routing sample of each arm.

    Args:
        arm_rewards: ``M`` sequences, the rewards of each arm's rollouts (each non-empty).
        eps: ε of the normalisation (``RLConfig.eps``).

    Returns:
        ``(M,)`` float64 advantages; all zero when every arm has the same mean (or ``M == 1``).

    >>> routing_advantages([[1, 1], [0, 0]]).round(4).tolist()   # means 1, 0: mean .5, std .5
    [1.0, -1.0]
    >>> routing_advantages([[1, 0], [0, 0], [1, 1]], eps=0.0).round(4).tolist()  # means .5, 0, 1
    [0.0, -1.2247, 1.2247]
    >>> routing_advantages([[0.3, 0.7], [0.5]]).tolist()   # equal means: no routing signal
    [0.0, 0.0]
    """
    if len(arm_rewards) == 0:
        raise ValueError("routing_advantages needs at least one arm")
    means = []
    for k, r in enumerate(arm_rewards):
        r = np.asarray(r, dtype=np.float64).reshape(-1)
        if r.size == 0:
            raise ValueError(f"arm {k} has no rollouts: every arm needs at least one reward")
        means.append(r.mean())
    m = np.asarray(means)  # (M,)
    return _standardise(m, eps)


def execution_advantages(
    rewards: ArrayLike,
    arm_ids: Optional[ArrayLike] = None,
    eps: float = 1e-6,
    exec_group: str = "arm",
) -> np.ndarray:
    """Group-relative execution advantage of each trajectory of one task group (DESIGN.md §5).

        A_exec(i) = (R_i − mean_{j∈k} R_j) / (std_{j∈k} R_j + ε)      i in arm k   (exec_group="arm")

    With ``exec_group="task"`` (ablation) the mean and population std run over the whole group instead
    of trajectory ``i``'s arm — plain GRPO, in which a better talent also raises every execution token.
    The result is broadcast by the caller to every execution sample of trajectory ``i``.

    Args:
        rewards: ``(G,)`` final rewards of the group's trajectories.
        arm_ids: ``(G,)`` arm of each trajectory (any hashable labels); ``None`` means one arm.
        eps: ε of the normalisation (``RLConfig.eps``).
        exec_group: ``"arm"`` or ``"task"`` (``RLConfig.exec_group``; an ``ExecGroup`` enum also works).

    Returns:
        ``(G,)`` float64 advantages.

    >>> r, arms = [1, 0, 1, 1], [0, 0, 1, 1]
    >>> execution_advantages(r, arms, eps=0.0).tolist()    # arm 0: mean .5 std .5; arm 1 constant
    [1.0, -1.0, 0.0, 0.0]
    >>> execution_advantages(r, arms, eps=0.0, exec_group="task").round(4).tolist()  # mean .75, std .433
    [0.5774, -1.7321, 0.5774, 0.5774]
    """
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)  # (G,)
    group = getattr(exec_group, "value", exec_group)
    if group not in ("arm", "task"):
        raise ValueError(f"exec_group={exec_group!r}: choose 'arm' or 'task'")
    if arm_ids is None or group == "task":
        return _standardise(r, eps)
    arms = np.asarray(arm_ids).reshape(-1)
    if arms.shape != r.shape:
        raise ValueError(f"arm_ids has {arms.size} entries but rewards has {r.size}: one arm id per trajectory")
    adv = np.zeros_like(r)
    for k in np.unique(arms):
        sel = arms == k
        adv[sel] = _standardise(r[sel], eps)
    return adv


def zero_variance_mask(group_rewards: Sequence[ArrayLike], atol: float = 1e-9) -> np.ndarray:
    """Which groups have all-equal rewards (dynamic sampling; DESIGN.md §5, after DAPO).

    Such a group carries no signal: every execution advantage and every routing advantage is 0 (when the
    whole group is constant so is every arm). ``True`` marks a group to drop when
    ``RLConfig.filter_zero_var`` is on. An empty group is ``True`` (nothing to learn from either).

    Args:
        group_rewards: one sequence of rewards per group (all arms of a task together).
        atol: rewards whose max − min is at most this count as equal.

    Returns:
        ``(n_groups,)`` bool.

    >>> zero_variance_mask([[1, 1, 1], [0, 1, 0], [0.5, 0.5], []]).tolist()
    [True, False, True, True]
    """
    out = np.zeros(len(group_rewards), dtype=bool)
    for g, r in enumerate(group_rewards):
        r = np.asarray(r, dtype=np.float64).reshape(-1)
        out[g] = r.size == 0 or float(r.max() - r.min()) <= atol
    return out


def matched_divergence(actions_by_arm: Sequence[Sequence[Sequence[str]]]) -> float:
    """Share of matched rollouts ``j`` whose action sequences are not the same in every arm.

    Rollout ``j`` of every arm shares sampling seed ``j`` and the initial state, so when the executor
    ignores the talent text the arms replay the same actions and every routing contrast is 0: this is
    the direct measurement of talent sensitivity (logged as ``route/divergence``). Arms are compared
    up to the shortest arm; with fewer than two arms there is nothing to compare (0.0).

    Args:
        actions_by_arm: ``M`` arms, each a list over rollouts ``j`` of that rollout's action sequence.

    >>> same, other = ["go east", "take coin"], ["go west"]
    >>> matched_divergence([[same, same], [same, other]])
    0.5
    >>> matched_divergence([[same, other], [same, other], [same, other]])
    0.0
    >>> matched_divergence([[same]])
    0.0
    """
    if len(actions_by_arm) < 2:
        return 0.0
    n = min(len(a) for a in actions_by_arm)
    if n == 0:
        return 0.0
    differ = sum(1 for j in range(n) if len({tuple(arm[j]) for arm in actions_by_arm}) > 1)
    return differ / n


def response_surprisal(token_logprobs: ArrayLike, mask: ArrayLike, traj_ids: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Response-level surprisal ``u_i``: mean token NLL over all execution completions of trajectory i.

    DESIGN.md §5 (AEM-style modulation, ours). Tokens of every execution sample of a trajectory are
    pooled (a token-weighted mean, not a mean of per-sample means).

    Args:
        token_logprobs: ``(N, T)`` log-probs of the sampled tokens under the rollout policy.
        mask: ``(N, T)`` 1 on completion tokens, 0 on prompt/padding.
        traj_ids: ``(N,)`` trajectory of each sample.

    Returns:
        ``(traj_labels, u)``: the sorted unique trajectory labels ``(G,)`` and their surprisal ``(G,)``.

    >>> lp = [[-1.0, -3.0], [-2.0, 0.0], [-0.5, -0.5]]
    >>> labels, u = response_surprisal(lp, [[1, 1], [1, 0], [1, 1]], [0, 0, 1])
    >>> labels.tolist(), u.tolist()     # traj 0: (1+3+2)/3; traj 1: .5
    ([0, 1], [2.0, 0.5])
    """
    lp = np.asarray(token_logprobs, dtype=np.float64)  # (N, T)
    m = np.asarray(mask, dtype=np.float64)  # (N, T)
    ids = np.asarray(traj_ids).reshape(-1)  # (N,)
    if lp.shape != m.shape or lp.ndim != 2 or ids.size != lp.shape[0]:
        raise ValueError(f"shapes: token_logprobs {lp.shape}, mask {m.shape}, traj_ids {ids.shape}; need (N,T),(N,T),(N,)")
    labels = np.unique(ids)
    u = np.empty(labels.size)
    for g, t in enumerate(labels):
        sel = ids == t
        n_tok = m[sel].sum()
        u[g] = -(lp[sel] * m[sel]).sum() / max(n_tok, 1.0)
    return labels, u


def aem_modulate(
    adv: ArrayLike,
    surprisal: ArrayLike,
    eta: float,
    clip_c: float,
    eps: float = 1e-6,
) -> np.ndarray:
    """AEM-style surprisal modulation of one group's advantages (DESIGN.md §5; ours, off by default).

        z_i  = (u_i − mean_j u_j) / (std_j u_j + ε)           population std over the group
        A'_i = A_i · clip(exp(η · sign(A_i) · z_i), 1/c, c)

    The *factor* is clipped, not ``A'`` (DESIGN.md's "clipped to [1/c, c]" read as a bound on how much
    the modulation may scale an advantage, so the sign and the zero set of ``A`` are preserved). With
    ``η > 0`` (early) surprising successes are amplified and surprising failures punished less
    (explore); with ``η < 0`` (late) confident successes dominate (exploit).

    Args:
        adv: ``(G,)`` advantages of the group's trajectories (routing or execution).
        surprisal: ``(G,)`` response-level surprisal ``u_i`` (``response_surprisal``).
        eta: ``η_t`` (``aem_eta``).
        clip_c: ``c > 1``; the factor stays in ``[1/c, c]`` (``RLConfig.aem_clip``).
        eps: ε of the standardisation.

    Returns:
        ``(G,)`` modulated advantages.

    >>> a = aem_modulate([1.0, -1.0, 1.0, -1.0], [3.0, 3.0, 1.0, 1.0], eta=0.5, clip_c=10.0, eps=0.0)
    >>> a.round(4).tolist()            # z = [1, 1, -1, -1]; factors e^.5, e^-.5, e^-.5, e^.5
    [1.6487, -0.6065, 0.6065, -1.6487]
    >>> aem_modulate([2.0, 0.0], [5.0, 1.0], eta=1.0, clip_c=2.0, eps=0.0).tolist()  # e^1 clipped to 2
    [4.0, 0.0]
    """
    a = np.asarray(adv, dtype=np.float64).reshape(-1)  # (G,)
    u = np.asarray(surprisal, dtype=np.float64).reshape(-1)  # (G,)
    if a.shape != u.shape:
        raise ValueError(f"adv has {a.size} entries but surprisal has {u.size}: one per trajectory")
    if clip_c < 1.0:
        raise ValueError(f"clip_c={clip_c}: the factor is clipped to [1/c, c], so c must be >= 1")
    if a.size == 0:
        return a.copy()
    z = _standardise(u, eps)  # (G,)
    factor = np.clip(np.exp(eta * np.sign(a) * z), 1.0 / clip_c, clip_c)
    return a * factor


def aem_eta(step: int, total: int, eta0: float) -> float:
    """Linear schedule of the AEM strength from ``+η_0`` at the first update to ``−η_0`` at the last.

    DESIGN.md §5 ("η_t scheduled from η_0 to −η_0 over training"). Steps are 0-based; the last update is
    ``total − 1``. Steps outside ``[0, total − 1]`` are clamped; ``total == 1`` gives ``η_0``.

    >>> [aem_eta(s, 5, 0.5) for s in range(5)]
    [0.5, 0.25, 0.0, -0.25, -0.5]
    >>> aem_eta(0, 1, 0.5), aem_eta(99, 5, 0.5)
    (0.5, -0.5)
    """
    if total < 1:
        raise ValueError(f"total={total}: the schedule needs at least one update")
    if total == 1:
        return float(eta0)
    frac = min(max(step, 0), total - 1) / (total - 1)
    return float(eta0 * (1.0 - 2.0 * frac))


def trajectory_surprisal(ex) -> np.ndarray:
    """u_i: mean NLL of trajectory i's execution tokens under the rollout policy (AEM, DESIGN.md §5); ``ex[i]`` are
    trajectory i's execution samples (each with ``old_logprobs``). A trajectory without samples gets the mean of
    the others."""
    rows = [(i, s.old_logprobs) for i, ss in enumerate(ex) for s in ss]
    u = np.zeros(len(ex))
    if not rows:
        return u
    T = max(len(lp) for _, lp in rows)
    lp = np.zeros((len(rows), T))
    m = np.zeros((len(rows), T))
    for r, (_, x) in enumerate(rows):
        lp[r, :len(x)], m[r, :len(x)] = x, 1.0
    labels, vals = response_surprisal(lp, m, [i for i, _ in rows])
    u[:] = vals.mean()
    u[labels] = vals
    return u

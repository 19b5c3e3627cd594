"""PPO-clipped surrogate for routing and execution samples (DESIGN.md §5).

    ρ_t  = exp(log π_θ(y_t) − log π_old(y_t))                    ratio against the rollout log-probs
    ℓ_t  = −min(ρ_t · A_t, clip(ρ_t, 1−ε, 1+ε) · A_t)  [+ β · KL̂_t(π_θ ‖ π_ref)]
    L    = aggregate(ℓ over completion tokens)                      token_mean | seq_mean_token_sum
    L_total = L_exec + α_route · L_route

Both sample kinds (routing: task + talent menu → ``<talent>ID</talent>``; execution: context →
``<think>…</think><action>…</action>``) use the same per-token loss; only the advantage differs
(``token_advantages``). Prompt and environment tokens are masked out. The optional KL term uses the k3
estimator of http://joschu.net/blog/kl-approx.html (as TRL's GRPO and tiny-grpo do); it sits inside
each ``ppo_clip_loss`` call. ``L_total`` is formed in ``update.py``: each routing micro-batch's loss is weighted by
``α_route`` (its KL with it), each execution micro-batch's by 1, their sum being the mini-batch-wide aggregate.

Aggregations (``RLConfig.token_agg``):
    token_mean           Σ_{b,t} m·ℓ / Σ_{b,t} m — every completion token weighs the same (DAPO; TRL's
                         ``bnpo``; verl's ``token-mean``).
    seq_mean_token_sum   mean over sequences of Σ_t m·ℓ — longer completions weigh more (verl's
                         ``seq-mean-token-sum``); the mean runs over sequences with at least one token.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np
import torch

Tensorish = Union[torch.Tensor, Sequence[float], np.ndarray]


def _as_tensor(x: Tensorish, like: Optional[torch.Tensor] = None) -> torch.Tensor:
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x, dtype=np.float32))
    if like is not None:
        t = t.to(device=like.device)
    return t


def approx_kl_k3(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π_p ‖ π_q) from samples of π_p: ``r − 1 − log r``, ``r = q/p``.

    Unbiased and always ≥ 0 (Schulman, "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html).

    >>> approx_kl_k3(torch.tensor([-1.0, -2.0]), torch.tensor([-1.0, -2.0])).tolist()
    [0.0, 0.0]
    >>> round(approx_kl_k3(torch.tensor([0.0]), torch.tensor([-1.0])).item(), 4)   # e^-1 − 1 + 1
    0.3679
    """
    log_r = logq - logp
    return torch.exp(log_r) - 1.0 - log_r


def _aggregate(per_token: torch.Tensor, mask: torch.Tensor, agg: str) -> torch.Tensor:
    """Reduce ``(B, T)`` per-token values over masked tokens to a scalar (module docstring)."""
    if agg == "token_mean":
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    if agg == "seq_mean_token_sum":
        seq = (per_token * mask).sum(dim=-1)  # (B,)
        n_seq = (mask.sum(dim=-1) > 0).sum().clamp(min=1)
        return seq.sum() / n_seq
    raise ValueError(f"agg={agg!r}: choose 'token_mean' or 'seq_mean_token_sum'")


def _checked(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: Tensorish,
             mask: Tensorish) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(old log-probs, mask, advantages) as ``(B, T)`` tensors of ``logprobs``' dtype; ValueError naming the shapes
    that do not fit."""
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be (B, T), got shape {tuple(logprobs.shape)}")
    old = _as_tensor(old_logprobs, logprobs).to(logprobs.dtype)
    m = _as_tensor(mask, logprobs).to(logprobs.dtype)  # (B, T)
    adv = _as_tensor(advantages, logprobs).to(logprobs.dtype)
    if old.shape != logprobs.shape or m.shape != logprobs.shape:
        raise ValueError(
            f"shapes differ: logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old.shape)}, mask {tuple(m.shape)}"
        )
    if adv.dim() == 1:
        if adv.shape[0] != logprobs.shape[0]:
            raise ValueError(f"advantages {tuple(adv.shape)} must be (B,) or (B, T) with B={logprobs.shape[0]}")
        adv = adv.unsqueeze(-1).expand_as(logprobs)  # (B,) -> (B, T)
    elif adv.shape != logprobs.shape:
        raise ValueError(f"advantages {tuple(adv.shape)} must be (B,) or (B, T) = {tuple(logprobs.shape)}")
    return old, m, adv


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: Tensorish,
    mask: Tensorish,
    clip_eps: float = 0.2,
    agg: str = "token_mean",
    ref_logprobs: Optional[torch.Tensor] = None,
    beta: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clipped surrogate loss over completion tokens (DESIGN.md §5; PPO, Schulman et al. 2017).

    Args:
        logprobs: ``(B, T)`` log π_θ of the sampled tokens (carries the gradient).
        old_logprobs: ``(B, T)`` log-probs recorded at rollout (no gradient).
        advantages: ``(B,)`` per-sequence advantages (broadcast over tokens) or ``(B, T)`` per token.
        mask: ``(B, T)`` 1/True on completion tokens, 0 on prompt, environment and padding tokens.
        clip_eps: ε; the ratio is clipped to ``[1−ε, 1+ε]`` (``RLConfig.clip_eps``).
        agg: ``"token_mean"`` or ``"seq_mean_token_sum"`` (``RLConfig.token_agg``; the enum also works).
        ref_logprobs: ``(B, T)`` log-probs under the reference model; needed when ``beta > 0``.
        beta: β of the KL penalty (``RLConfig.beta_kl``; 0 = off).

    Returns:
        ``(loss, metrics)``: the scalar loss and floats ``pg_loss`` (surrogate without KL),
        ``clip_frac`` (share of completion tokens where the clipped branch is active: ρ > 1+ε with A > 0
        or ρ < 1−ε with A < 0), ``approx_kl`` (k3 estimate of KL(π_old ‖ π_θ), the policy's drift since
        rollout), ``ratio_mean``, ``ratio_max``, and ``kl_ref`` (k3 of KL(π_θ ‖ π_ref)) when
        ``ref_logprobs`` is given. All metrics are token means over the mask.

    At ρ = 1 the loss is minus the mean advantage over completion tokens:

    >>> lp = torch.zeros(2, 3)
    >>> loss, m = ppo_clip_loss(lp, lp, torch.tensor([2.0, -1.0]), torch.tensor([[1, 1, 0], [1, 0, 0]]))
    >>> round(loss.item(), 4), m["clip_frac"], m["ratio_mean"]    # −(2 + 2 − 1) / 3 tokens
    (-1.0, 0.0, 1.0)
    """
    agg = getattr(agg, "value", agg)
    old, m, adv = _checked(logprobs, old_logprobs, advantages, mask)
    if beta > 0 and ref_logprobs is None:
        raise ValueError("beta > 0 needs ref_logprobs (set rl.beta_kl=0 to train without a reference)")
    if clip_eps <= 0:
        raise ValueError(f"clip_eps={clip_eps} must be > 0")

    # Masked positions may hold garbage log-probs (padding): zero the log-ratio there so exp stays finite.
    log_ratio = (logprobs - old.detach()) * m  # (B, T)
    ratio = torch.exp(log_ratio)
    surr = ratio * adv
    surr_clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    per_token = -torch.min(surr, surr_clipped)  # (B, T)
    pg_loss = _aggregate(per_token, m, agg)
    loss = pg_loss

    metrics: dict[str, float] = {}
    if ref_logprobs is not None:
        ref = _as_tensor(ref_logprobs, logprobs).to(logprobs.dtype).detach()
        if ref.shape != logprobs.shape:
            raise ValueError(f"ref_logprobs {tuple(ref.shape)} must match logprobs {tuple(logprobs.shape)}")
        kl = approx_kl_k3(logprobs, ref) * m  # (B, T), KL(π_θ ‖ π_ref)
        if beta > 0:
            loss = _aggregate(per_token + beta * kl, m, agg)
        with torch.no_grad():
            metrics["kl_ref"] = float(_aggregate(kl, m, "token_mean"))

    with torch.no_grad():
        clipped = ((ratio > 1.0 + clip_eps) & (adv > 0)) | ((ratio < 1.0 - clip_eps) & (adv < 0))
        n_tok = m.sum().clamp(min=1.0)
        metrics["pg_loss"] = float(pg_loss)
        metrics["clip_frac"] = float((clipped.to(m.dtype) * m).sum() / n_tok)
        # k3 of KL(π_old ‖ π_θ) from samples of π_old: r = π_θ/π_old (cleanrl's approx_kl).
        metrics["approx_kl"] = float((approx_kl_k3(old, logprobs) * m).sum() / n_tok)
        metrics["ratio_mean"] = float((ratio * m).sum() / n_tok)
        metrics["ratio_max"] = float(ratio.masked_fill(m == 0, float("-inf")).max()) if m.any() else 1.0
    return loss, metrics


def token_advantages(
    sample_kinds: Sequence[str],
    route_adv: Tensorish,
    exec_adv: Tensorish,
    sample_arm: Optional[Sequence[int]] = None,
    sample_traj: Optional[Sequence[int]] = None,
    mask: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The advantage each training sample (and its tokens) receives, by sample kind (DESIGN.md §4–5).

    A ``"route"`` sample (step 0) gets the routing advantage of its arm; an ``"exec"`` sample (steps
    1..n) gets the execution advantage of its trajectory. Two ways to call it:

    * indexed: ``route_adv`` is ``(M,)`` per arm, ``exec_adv`` is ``(G,)`` per trajectory, and
      ``sample_arm[i]`` / ``sample_traj[i]`` give sample i's arm and trajectory (0-based indices);
    * aligned: ``sample_arm`` and ``sample_traj`` omitted, ``route_adv`` and ``exec_adv`` are ``(N,)``,
      already the routing/execution advantage of sample i's arm/trajectory; the kind picks one.

    Args:
        sample_kinds: ``(N,)`` ``"route"`` or ``"exec"`` per sample.
        mask: optional ``(N, T)`` completion mask; when given the result is broadcast to ``(N, T)``
            and zeroed off the mask.

    Returns:
        ``(N,)`` float32 advantages, or ``(N, T)`` when ``mask`` is given.

    >>> token_advantages(["route", "exec", "exec", "route", "exec"],
    ...                  route_adv=[0.5, -0.5], exec_adv=[1.0, -1.0],
    ...                  sample_arm=[0, 0, 0, 1, 1], sample_traj=[0, 0, 0, 1, 1]).tolist()
    [0.5, 1.0, 1.0, -0.5, -1.0]
    """
    kinds = list(sample_kinds)
    bad = sorted({k for k in kinds if k not in ("route", "exec")})
    if bad:
        raise ValueError(f"sample_kinds has {bad}: each sample is 'route' or 'exec'")
    ra = _as_tensor(route_adv).to(torch.float32).reshape(-1)
    ea = _as_tensor(exec_adv).to(torch.float32).reshape(-1)
    n = len(kinds)
    is_route = torch.tensor([k == "route" for k in kinds], dtype=torch.bool)  # (N,)
    if (sample_arm is None) != (sample_traj is None):
        raise ValueError("give both sample_arm and sample_traj (indexed form) or neither (aligned form)")
    if sample_arm is None:
        if ra.numel() != n or ea.numel() != n:
            raise ValueError(
                f"aligned form: route_adv ({ra.numel()}) and exec_adv ({ea.numel()}) need one entry per sample ({n})"
            )
        out = torch.where(is_route, ra, ea)  # (N,)
    else:
        arm = torch.as_tensor(list(sample_arm), dtype=torch.long).reshape(-1)
        traj = torch.as_tensor(list(sample_traj), dtype=torch.long).reshape(-1)
        if arm.numel() != n or traj.numel() != n:
            raise ValueError(f"sample_arm ({arm.numel()}) and sample_traj ({traj.numel()}) need one entry per sample ({n})")
        ra_idx, ea_idx = arm[is_route], traj[~is_route]
        if ra_idx.numel() and (ra_idx.min() < 0 or ra_idx.max() >= ra.numel()):
            raise ValueError(f"sample_arm of a route sample indexes outside route_adv (M={ra.numel()})")
        if ea_idx.numel() and (ea_idx.min() < 0 or ea_idx.max() >= ea.numel()):
            raise ValueError(f"sample_traj of an exec sample indexes outside exec_adv (G={ea.numel()})")
        out = torch.zeros(n, dtype=torch.float32)
        out[is_route] = ra[ra_idx]
        out[~is_route] = ea[ea_idx]
    if mask is not None:
        mk = _as_tensor(mask).to(torch.float32)
        if mk.dim() != 2 or mk.shape[0] != n:
            raise ValueError(f"mask {tuple(mk.shape)} must be (N, T) with N={n}")
        out = out.unsqueeze(-1) * mk  # (N,) -> (N, T)
    return out

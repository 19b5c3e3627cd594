"""RL math on hand-computed cases (DESIGN.md §5): advantages, filtering, AEM, invalid penalty, PPO loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from talentrl_core.config import ExecGroup, TokenAgg
from talentrl_core.rl.advantages import (
    aem_eta,
    aem_modulate,
    execution_advantages,
    response_surprisal,
    routing_advantages,
    zero_variance_mask,
)
from talentrl_core.rl.loss import approx_kl_k3, ppo_clip_loss, token_advantages

# ---------------------------------------------------------------- routing advantage


def test_routing_advantage_hand_computed():
    # arm means 0.75, 0.25, 0.5 -> mean 0.5, population std sqrt((1/16 + 1/16 + 0)/3) = 0.204124
    adv = routing_advantages([[1, 1, 1, 0], [0, 0, 1, 0], [1, 0, 1, 0]], eps=0.0)
    std = math.sqrt((0.25**2 * 2) / 3)
    np.testing.assert_allclose(adv, [0.25 / std, -0.25 / std, 0.0], rtol=1e-9)


def test_routing_advantage_uses_population_std_and_eps():
    adv = routing_advantages([[1.0], [0.0]], eps=0.5)  # means 1, 0: mean .5, pop std .5 -> ±.5/(.5+.5)
    np.testing.assert_allclose(adv, [0.5, -0.5])


def test_routing_advantage_single_arm_and_equal_means_are_zero():
    np.testing.assert_array_equal(routing_advantages([[1, 0, 1]]), [0.0])
    np.testing.assert_array_equal(routing_advantages([[1, 0], [0.5, 0.5]], eps=0.0), [0.0, 0.0])


def test_routing_advantage_rejects_empty_arm():
    with pytest.raises(ValueError, match="arm 1"):
        routing_advantages([[1.0], []])


# ---------------------------------------------------------------- execution advantage


def test_execution_advantage_within_arm():
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    arms = [0, 0, 0, 0, 1, 1, 1, 1]
    adv = execution_advantages(rewards, arms, eps=0.0)
    # arm 0: mean .25, std sqrt(.25*.75)=.4330; arm 1: mean .75, same std
    s = math.sqrt(0.25 * 0.75)
    expected = [0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s, 0.25 / s, 0.25 / s, 0.25 / s, -0.75 / s]
    np.testing.assert_allclose(adv, expected, rtol=1e-9)
    # talent choice does not leak into execution credit: each arm's advantages sum to zero
    assert abs(adv[:4].sum()) < 1e-9 and abs(adv[4:].sum()) < 1e-9


def test_execution_advantage_task_ablation_normalises_over_group():
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    arms = [0, 0, 0, 0, 1, 1, 1, 1]
    adv = execution_advantages(rewards, arms, eps=0.0, exec_group="task")
    # whole group: mean .5, std .5 -> ±1
    np.testing.assert_allclose(adv, [1, -1, -1, -1, 1, 1, 1, -1])
    # the enum from RLConfig is accepted too, and arm_ids are ignored
    np.testing.assert_allclose(execution_advantages(rewards, arms, eps=0.0, exec_group=ExecGroup.task), adv)
    # arm vs task differ: within-arm, a success in the better arm earns less credit
    within = execution_advantages(rewards, arms, eps=0.0, exec_group=ExecGroup.arm)
    assert within[4] < adv[4]


def test_execution_advantage_constant_arm_and_bad_inputs():
    np.testing.assert_array_equal(execution_advantages([1, 1, 0, 1], [0, 0, 1, 1], eps=0.0)[:2], [0.0, 0.0])
    with pytest.raises(ValueError, match="exec_group"):
        execution_advantages([1, 0], [0, 0], exec_group="batch")
    with pytest.raises(ValueError, match="one arm id per trajectory"):
        execution_advantages([1, 0, 1], [0, 0])


# ---------------------------------------------------------------- dynamic sampling


def test_zero_variance_mask_filters_constant_groups():
    groups = [[0, 0, 0, 0], [1, 0, 1, 1], [1.0, 1.0], [0.2, 0.2 + 1e-12], [0.2, 0.3]]
    assert zero_variance_mask(groups).tolist() == [True, False, True, True, False]
    # a constant group has all-zero advantages of both kinds: it is exactly what the mask drops
    assert not execution_advantages([1, 1, 1, 1], [0, 0, 1, 1]).any()
    assert not routing_advantages([[1, 1], [1, 1]]).any()


# ---------------------------------------------------------------- AEM


def test_aem_modulation_hand_computed():
    adv = [1.0, -1.0, 0.5, -0.5]
    u = [2.0, 0.0, 0.0, 2.0]  # mean 1, std 1 -> z = [1, -1, -1, 1]
    out = aem_modulate(adv, u, eta=0.3, clip_c=5.0, eps=0.0)
    # factor exp(.3 * sign(A) * z): [e^.3, e^.3, e^-.3, e^-.3]
    e = math.exp(0.3)
    np.testing.assert_allclose(out, [1.0 * e, -1.0 * e, 0.5 / e, -0.5 / e], rtol=1e-9)
    # eta = 0 is the identity; the sign of every advantage is preserved
    np.testing.assert_allclose(aem_modulate(adv, u, eta=0.0, clip_c=2.0), adv)
    assert (np.sign(out) == np.sign(adv)).all()


def test_aem_factor_clipped_to_1_over_c_and_c():
    adv = [1.0, 1.0, 1.0]
    u = [0.0, 0.0, 3.0]  # z = [-1/√2, -1/√2, √2] (pop std √2)
    out = aem_modulate(adv, u, eta=5.0, clip_c=1.5, eps=0.0)
    np.testing.assert_allclose(out, [1 / 1.5, 1 / 1.5, 1.5])
    with pytest.raises(ValueError, match="c must be >= 1"):
        aem_modulate(adv, u, eta=1.0, clip_c=0.5)


def test_aem_schedule_linear_from_plus_to_minus_eta0():
    etas = [aem_eta(s, 11, 0.4) for s in range(11)]
    np.testing.assert_allclose(etas[0], 0.4)
    np.testing.assert_allclose(etas[5], 0.0, atol=1e-12)
    np.testing.assert_allclose(etas[10], -0.4)
    np.testing.assert_allclose(np.diff(etas), -0.08)
    assert aem_eta(1000, 11, 0.4) == pytest.approx(-0.4)
    assert aem_eta(0, 1, 0.4) == 0.4


def test_response_surprisal_pools_tokens_of_a_trajectory():
    lp = np.log([[0.5, 0.25, 1.0], [0.5, 1.0, 1.0], [0.1, 1.0, 1.0]])
    mask = [[1, 1, 0], [1, 0, 0], [1, 0, 0]]
    labels, u = response_surprisal(lp, mask, ["a", "a", "b"])
    assert labels.tolist() == ["a", "b"]
    np.testing.assert_allclose(u, [(math.log(2) + math.log(4) + math.log(2)) / 3, math.log(10)])


# ---------------------------------------------------------------- invalid penalty


# ---------------------------------------------------------------- PPO loss


def test_ppo_loss_at_ratio_one_is_minus_masked_mean_advantage():
    torch.manual_seed(0)
    lp = torch.randn(3, 4)
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.float32)
    adv = torch.tensor([0.5, -1.0, 2.0])
    loss, m = ppo_clip_loss(lp, lp.clone(), adv, mask, clip_eps=0.2)
    expected = -(adv.unsqueeze(-1) * mask).sum() / mask.sum()  # -(3*.5 - 2 + 2)/6
    assert loss.item() == pytest.approx(expected.item())
    assert loss.item() == pytest.approx(-1.5 / 6)
    assert m["clip_frac"] == 0.0 and m["ratio_mean"] == pytest.approx(1.0) and m["approx_kl"] == pytest.approx(0.0)
    # per-token (B, T) advantages give the same result as the broadcast (B,) form
    loss_tok, _ = ppo_clip_loss(lp, lp, adv.unsqueeze(-1).expand(3, 4), mask)
    assert loss_tok.item() == pytest.approx(loss.item())


def test_ppo_loss_gradient_is_policy_gradient_at_ratio_one():
    lp = torch.zeros(1, 2, requires_grad=True)
    loss, _ = ppo_clip_loss(lp, torch.zeros(1, 2), torch.tensor([3.0]), torch.ones(1, 2))
    loss.backward()
    np.testing.assert_allclose(lp.grad.numpy(), [[-1.5, -1.5]])  # d/dlogp of -A·ρ/2 at ρ=1


def test_ppo_clipping_beyond_one_plus_minus_eps_and_clip_frac():
    eps = 0.2
    ratios = torch.tensor([[1.5, 0.5, 1.1, 0.7]])
    old = torch.zeros(1, 4)
    lp = torch.log(ratios).requires_grad_(True)
    # per-token advantages: +1, -1, +1, +1
    adv = torch.tensor([[1.0, -1.0, 1.0, 1.0]])
    loss, m = ppo_clip_loss(lp, old, adv, torch.ones(1, 4), clip_eps=eps)
    # token 0: ρ=1.5, A=+1 -> min(1.5, 1.2) = 1.2 (clipped)
    # token 1: ρ=.5,  A=-1 -> min(-.5, -.8) = -.8 (clipped)
    # token 2: ρ=1.1, A=+1 -> 1.1 (inside the trust region)
    # token 3: ρ=.7,  A=+1 -> min(.7, .8) = .7 (ratio below 1-ε but A>0: unclipped branch chosen)
    assert loss.item() == pytest.approx(-(1.2 - 0.8 + 1.1 + 0.7) / 4)
    assert m["clip_frac"] == pytest.approx(2 / 4)
    assert m["ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.1 + 0.7) / 4)
    loss.backward()
    g = lp.grad[0]
    assert g[0].item() == 0.0 and g[1].item() == 0.0  # clipped tokens carry no gradient
    assert g[2].item() != 0.0 and g[3].item() != 0.0


def test_ppo_aggregations_hand_computed():
    lp = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.float32)
    adv = torch.tensor([1.0, -2.0])
    # per-token loss = -A: seq 0 tokens [-1,-1,-1], seq 1 token [2]
    l_tok, _ = ppo_clip_loss(lp, lp, adv, mask, agg="token_mean")
    assert l_tok.item() == pytest.approx((-3 + 2) / 4)
    l_seq, _ = ppo_clip_loss(lp, lp, adv, mask, agg=TokenAgg.seq_mean_token_sum)
    assert l_seq.item() == pytest.approx((-3 + 2) / 2)
    # an all-masked (padding) row does not count as a sequence
    l_pad, _ = ppo_clip_loss(torch.zeros(3, 3), torch.zeros(3, 3), torch.tensor([1.0, -2.0, 5.0]),
                             torch.cat([mask, torch.zeros(1, 3)]), agg="seq_mean_token_sum")
    assert l_pad.item() == pytest.approx(l_seq.item())
    with pytest.raises(ValueError, match="agg"):
        ppo_clip_loss(lp, lp, adv, mask, agg="sum")


def test_masked_garbage_logprobs_do_not_leak():
    lp = torch.tensor([[-1.0, 0.0]])
    old = torch.tensor([[-1.0, -1e9]])  # padding position holds garbage
    loss, m = ppo_clip_loss(lp, old, torch.tensor([1.0]), torch.tensor([[1.0, 0.0]]))
    assert math.isfinite(loss.item()) and loss.item() == pytest.approx(-1.0)
    assert math.isfinite(m["ratio_max"]) and m["ratio_max"] == pytest.approx(1.0)


def test_kl_term_zero_when_ref_equals_current_and_positive_otherwise():
    torch.manual_seed(1)
    lp = torch.randn(2, 3)
    mask = torch.ones(2, 3)
    adv = torch.tensor([1.0, -1.0])
    base, _ = ppo_clip_loss(lp, lp, adv, mask)
    with_kl, m = ppo_clip_loss(lp, lp, adv, mask, ref_logprobs=lp.clone(), beta=0.5)
    assert with_kl.item() == pytest.approx(base.item()) and m["kl_ref"] == pytest.approx(0.0, abs=1e-7)
    ref = lp - 0.3
    with_kl2, m2 = ppo_clip_loss(lp, lp, adv, mask, ref_logprobs=ref, beta=0.5)
    k3 = math.exp(-0.3) - 1 + 0.3  # ratio r = π_ref/π_θ = e^-0.3
    assert m2["kl_ref"] == pytest.approx(k3, rel=1e-5)
    assert with_kl2.item() == pytest.approx(base.item() + 0.5 * k3, rel=1e-5)
    with pytest.raises(ValueError, match="ref_logprobs"):
        ppo_clip_loss(lp, lp, adv, mask, beta=0.1)


def test_k3_estimator_is_nonnegative():
    p = torch.randn(100)
    q = torch.randn(100)
    assert (approx_kl_k3(p, q) >= -1e-7).all()


def test_ppo_shape_errors():
    with pytest.raises(ValueError, match="advantages"):
        ppo_clip_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="shapes differ"):
        ppo_clip_loss(torch.zeros(2, 3), torch.zeros(2, 2), torch.zeros(2), torch.ones(2, 3))


def test_routing_tokens_receive_routing_advantage_and_execution_tokens_execution_advantage():
    # one group: 2 arms x 2 trajectories; each trajectory = 1 routing sample + 2 execution samples
    rewards = [1.0, 0.0, 1.0, 1.0]
    arm_of_traj = [0, 0, 1, 1]
    a_route = routing_advantages([[1.0, 0.0], [1.0, 1.0]], eps=0.0)  # means .5, 1 -> [-1, 1]
    a_exec = execution_advantages(rewards, arm_of_traj, eps=0.0)  # arm 0: [1, -1]; arm 1: [0, 0]
    kinds, s_arm, s_traj = [], [], []
    for t in range(4):
        for kind in ("route", "exec", "exec"):
            kinds.append(kind)
            s_arm.append(arm_of_traj[t])
            s_traj.append(t)
    mask = torch.ones(len(kinds), 5)
    mask[:, 3:] = 0  # prompt/padding tail
    tok = token_advantages(kinds, a_route, a_exec, s_arm, s_traj, mask=mask)
    assert tok.shape == (12, 5)
    for i, kind in enumerate(kinds):
        want = a_route[s_arm[i]] if kind == "route" else a_exec[s_traj[i]]
        assert torch.allclose(tok[i, :3], torch.full((3,), float(want)))
        assert (tok[i, 3:] == 0).all()
    # explicit: trajectory 1 (arm 0, failed): routing tokens -1, execution tokens -1; traj 2: +1 and 0
    assert tok[3, 0].item() == pytest.approx(-1.0) and tok[4, 0].item() == pytest.approx(-1.0)
    assert tok[6, 0].item() == pytest.approx(1.0) and tok[7, 0].item() == pytest.approx(0.0)
    # aligned form gives the same per-sample advantages
    aligned = token_advantages(kinds, [a_route[a] for a in s_arm], [a_exec[t] for t in s_traj])
    assert torch.allclose(aligned, tok[:, 0])


def test_token_advantages_rejects_bad_kinds_and_indices():
    with pytest.raises(ValueError, match="'route' or 'exec'"):
        token_advantages(["route", "action"], [0.0, 0.0], [0.0, 0.0])
    with pytest.raises(ValueError, match="route_adv"):
        token_advantages(["route"], [0.5], [1.0], sample_arm=[3], sample_traj=[0])

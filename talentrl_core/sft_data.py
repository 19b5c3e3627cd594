"""SFT samples (DESIGN.md §4): what talent-aware SFT trains on, built from successful trajectories and tokenised.

From each *successful* trajectory:
  * one routing sample: task + talent menu → ``<talent>ID</talent>``. ``sft.routing_labels=demonstrator`` (the
    default): one per (task, label), labelled with the talent of the demonstration (its strategy's talent), counted
    ``sft.demonstrator_habit[strategy]`` times; ``measured_best``: one per task, the talent that measured best on the
    task's type (``routing_target``);
  * one execution sample per step whose skill context comes from ``Knowledge.context`` under that talent —
    the very function the rollout loop calls at inference, on the same library version.
The builder reports and enforces: share of execution samples with ≥ 1 skill, label distribution,
duplicate share. ``tokenize_sample`` renders a sample with the chat template and masks all but the reply.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Sequence

from .config import RoutingLabels, RoutingTarget, SFTConfig
from .prompts import (CHAT_TEMPLATE_KWARGS, RoutingCue, exec_context, execution_messages, format_action, format_talent,
                      routing_prompt, routing_view, shown_id)
from .rl.seeding import derive_seed
from .policies import action_completions
from .rollout import Knowledge
from .trajectories import Trajectory


@dataclass
class SFTData:
    samples: list[dict]
    ("Each {'messages': [system, user, assistant], 'kind': 'route'|'exec', 'task_id', 'talent_id', 'skill_ids'}; a "
     "routing sample also has 'weight' (draws per epoch before sft.routing_weight).")
    report: dict = field(default_factory=dict)


def step_observations(t: Trajectory) -> list[str]:
    """The observation shown *before* each step (initial observation, then each step's answer)."""
    obs = [t.initial_observation]
    for s in t.steps[:-1]:
        obs.append(s.observation)
    return obs


def forced(env: str, admissible: Optional[Sequence[str]]) -> bool:
    """Whether constrained decoding allows exactly one completion at this step (it then takes it unasked).

    >>> forced("textworld", ["go north", "look", "inventory"]), forced("textworld", ["go north", "go east"])
    (True, False)
    >>> forced("qa", None)
    False
    """
    allowed = action_completions(env, list(admissible) if admissible is not None else None)
    return allowed is not None and len(allowed) == 1


def execution_samples(t: Trajectory, knowledge: Knowledge, talent_id: Optional[str], history: int, obs_chars: int,
                      skip_forced: bool = False, memory: bool | str = False,
                      labels: Optional[Sequence[Optional[str]]] = None) -> list[dict]:
    """One sample per valid environment step of ``t``: the prompt the policy saw there, the command taken as target;
    ``labels`` (one per environment step, DAgger's teacher commands) replace the targets, a None label no sample."""
    ctx = knowledge.context(t.env, t.goal, t.task_type, talent_id, True)
    out = []
    steps = t.env_steps()
    obs_before = [t.initial_observation] + [s.observation for s in steps[:-1]]
    targets = list(labels) if labels is not None else [s.action for s in steps]
    hist: list[tuple[str, str]] = []
    for s, obs, target in zip(steps, obs_before, targets):
        if not s.valid or not s.action or not target or (skip_forced and forced(t.env, s.admissible)):
            hist.append((obs, s.action or s.completion))
            continue
        ec = exec_context(t.env, t.goal, obs, ctx.talent, ctx.skills, hist, history, s.admissible, obs_chars, memory)
        msgs = execution_messages(ec) + [{"role": "assistant", "content": format_action(t.env, target)}]
        out.append({"messages": msgs, "kind": "exec", "task_id": t.task_id, "talent_id": talent_id or "",
                    "skill_ids": list(ctx.skill_ids)})
        hist.append((obs, s.action))
    return out


def routing_label(knowledge: Knowledge, t: Trajectory) -> Optional[str]:
    """The routing target of ``t``'s task (``LibraryKnowledge.routing_label``; other knowledge: the trajectory's label)."""
    fn = getattr(knowledge, "routing_label", None)
    return fn(t) if fn is not None else knowledge.label_for(t)


def routing_target(knowledge: Knowledge, t: Trajectory, cfg: SFTConfig) -> tuple[Optional[str], tuple, int]:
    """(label, dedup key, weight) of the routing sample ``t`` contributes (``sft.routing_labels``)."""
    if cfg.routing_labels == RoutingLabels.measured_best:
        return routing_label(knowledge, t), (t.task_id,), 1
    label = knowledge.label_for(t)
    return label, (t.task_id, label), int(cfg.demonstrator_habit.get(t.strategy or "", 1))


def restated_cue(cue: Optional[RoutingCue], t: Trajectory, obs_chars: int) -> str:
    """The ``<cue>…</cue>`` the router restates before its talent on ``t``'s task ("" without ``env.routing_cue``);
    a task whose routing view has no cue is named."""
    if cue is None:
        return ""
    said = cue.read(routing_view(t.goal, t.initial_observation, obs_chars))
    if said is None:
        raise ValueError(f"task {t.task_id}: env.routing_cue={cue.pattern!r} finds none of {list(cue.values)} in what "
                         f"the router sees of it ({routing_view(t.goal, t.initial_observation, obs_chars)!r})")
    return cue.format(said)


def rendered_flat(t: Trajectory, share: float, seed: int = 0) -> bool:
    """Whether ``t``'s execution samples are rendered flat (``sft.flat_share``): a stable hash of the trajectory's
    uid and the seed, so the same data and seed give the same split on every machine.

    >>> rendered_flat(Trajectory("r", "textworld", "train", "t1", "x", "{}", traj_uid="a"), 0.0)
    False
    >>> rendered_flat(Trajectory("r", "textworld", "train", "t1", "x", "{}", traj_uid="a"), 1.0)
    True
    """
    return share > 0.0 and derive_seed(seed, t.traj_uid) / float(1 << 60) < share


def build_sft_data(
    trajs: Sequence[Trajectory],
    knowledge: Knowledge,
    cfg: SFTConfig,
    history: int = 2,
    obs_chars: int = 400,
    enforce: bool = True,
    routing_obs_chars: int = 0,
    memory: bool | str = False,
    cue: Optional[RoutingCue] = None,
) -> SFTData:
    samples: list[dict] = []
    labels: Counter = Counter()
    n_succ = n_flat = 0
    routed: set[tuple] = set()
    for t in trajs:
        if not t.success or t.error:
            continue
        n_succ += 1
        talent = knowledge.label_for(t)
        labels[talent or "<none>"] += 1
        menu = knowledge.menu(t.env)
        route_to, key, weight = routing_target(knowledge, t, cfg)
        if cfg.include_routing and route_to and menu and key not in routed:
            routed.add(key)
            said = restated_cue(cue, t, routing_obs_chars)
            msgs = routing_prompt(t.env, t.goal, t.initial_observation, menu, routing_obs_chars) + [
                {"role": "assistant", "content": said + format_talent(shown_id(menu, route_to))}]
            samples.append({"messages": msgs, "kind": "route", "task_id": t.task_id, "talent_id": route_to, "skill_ids": [],
                            "weight": weight, **({"label_upto": said} if cfg.routing_target == RoutingTarget.cue_only else {})})
        flat = rendered_flat(t, cfg.flat_share, cfg.seed)
        n_flat += flat
        samples.extend(execution_samples(t, knowledge, None if flat else talent, history, obs_chars, cfg.skip_forced, memory))
    exec_s = [s for s in samples if s["kind"] == "exec"]
    with_skill = sum(1 for s in exec_s if s["skill_ids"])
    keys = [json.dumps(s["messages"], sort_keys=True) for s in samples]
    dup = 1 - len(set(keys)) / max(len(keys), 1)
    report = {
        "n_trajectories": len(trajs),
        "n_successful": n_succ,
        "n_samples": len(samples),
        "n_routing": len(samples) - len(exec_s),
        "n_execution": len(exec_s),
        "skill_context_share": with_skill / max(len(exec_s), 1),
        "label_distribution": dict(sorted(labels.items())),
        "routing_label_distribution": dict(sorted(Counter(
            s["talent_id"] for s in samples if s["kind"] == "route" for _ in range(s["weight"])).items())),
        "flat_trajectories": n_flat,
        "duplicate_share": dup,
    }
    if enforce:
        if not samples:
            raise ValueError("SFT data is empty: no successful trajectories to learn from")
        if report["skill_context_share"] < cfg.min_skill_share:
            raise ValueError(
                f"only {report['skill_context_share']:.1%} of execution samples carry a skill "
                f"(sft.min_skill_share={cfg.min_skill_share}): check library.delta / the library version"
            )
        if dup > cfg.max_duplicate_share:
            raise ValueError(f"{dup:.1%} of SFT samples are duplicates (sft.max_duplicate_share={cfg.max_duplicate_share})")
    return SFTData(samples, report)


_GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")


def _render(tok, messages: list[dict], add_generation_prompt: bool = False) -> list[int]:
    out = tok.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=add_generation_prompt,
                                  **CHAT_TEMPLATE_KWARGS)
    return list(out["input_ids"])


def _common_suffix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def assistant_mask_by_prefix(tok, messages: list[dict]) -> tuple[list[int], list[int]]:
    """Token ids and loss mask of a chat sample for a template without ``{% generation %}`` markers (the official
    Qwen2.5, Qwen3 and Llama-3.1 templates): every assistant turn's tokens are what the template appends to the
    conversation before it rendered with the generation prompt — exactly what the model generates at inference —
    up to and including the end-of-turn token (``tok.eos_token``); the template's text after it is not labelled.

    Raises ValueError naming the turn when the template is not prefix-preserving for this sample.
    """
    full = _render(tok, messages)
    mask = [0] * len(full)
    eos = tok.eos_token_id
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt = _render(tok, messages[:i], add_generation_prompt=True)
        upto = _render(tok, messages[: i + 1])
        if full[: len(prompt)] != prompt or full[: len(upto)] != upto or upto[: len(prompt)] != prompt:
            raise ValueError(
                f"the chat template is not prefix-preserving at assistant turn {i}: rendering the conversation before it "
                "with the generation prompt is not a prefix of the rendered sample; give the template {% generation %} markers"
            )
        other = _render(tok, messages[:i] + [{**m, "content": m["content"] + " ~"}])
        end = len(upto) - _common_suffix(upto, other)  # where the assistant's own text stops
        tail = upto[end:]
        if eos is not None and eos in tail:
            end += tail.index(eos) + 1
        for j in range(len(prompt), max(end, len(prompt))):
            mask[j] = 1
    return full, mask


def tokenize_sample(tok, messages: list[dict], max_length: int, label_upto: Optional[str] = None) -> dict:
    """Chat-template token ids and the assistant-token mask (the loss mask) of one sample.

    A template with ``{% generation %}`` markers gives the mask directly; any other template gets it from the
    rendered prompt with and without each assistant turn (``assistant_mask_by_prefix``). A sample longer than
    ``max_length`` loses the start of its prompt, as generation does: the label (the assistant turn at the end)
    is never cut; ``length`` is the sample's length before the cut (``check_cut`` reads it).
    """
    if _GENERATION_TAG.search(tok.chat_template or ""):
        out = tok.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                      **CHAT_TEMPLATE_KWARGS)
        ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    else:
        ids, mask = assistant_mask_by_prefix(tok, messages)
    if label_upto is not None:
        mask = labelled_upto(tok, messages, ids, mask, label_upto)
    if not any(mask):
        raise ValueError("the chat template marks no assistant tokens in this sample")
    return {"input_ids": ids[-max_length:], "assistant_masks": mask[-max_length:], "length": len(ids)}


def labelled_upto(tok, messages: list[dict], ids: list[int], mask: list[int], label_upto: str) -> list[int]:
    """``mask`` with the last assistant turn labelled only up to the end of its text ``label_upto`` (a prefix of it):
    the tokens after it, the end-of-turn token with them, get no loss (``sft.routing_target=cue_only``: the restated
    cue is supervised, the talent choice is not). The cut is where the two renderings' tokens first differ, so a
    token the tokenizer merged across the boundary is left unlabelled too."""
    if not messages[-1]["content"].startswith(label_upto):
        raise ValueError(f"the assistant turn {messages[-1]['content']!r} does not start with {label_upto!r}")
    short, _ = assistant_mask_by_prefix(tok, messages[:-1] + [{**messages[-1], "content": label_upto}])
    short = short[:-1] if short and short[-1] == tok.eos_token_id else short
    n = 0
    while n < min(len(short), len(ids)) and short[n] == ids[n]:
        n += 1
    return [m if j < n else 0 for j, m in enumerate(mask)]


def check_cut(rows: list[dict], max_length: int, max_share: float) -> dict:
    """Pop each row's ``length``; {n_cut, cut_share, longest}. Logs any cut and refuses (naming the settings) when
    more than ``max_share`` of the samples were cut: a cut sample loses the start of its prompt, the task line first,
    so the model learns to act without seeing its task (WebShop's product pages at 1,024 tokens, 69% of the samples:
    docs/results/webshop). TRL cuts silently; this says so.
    """
    lengths = [r.pop("length") for r in rows]
    n_cut = sum(n > max_length for n in lengths)
    out = {"n_cut": n_cut, "cut_share": n_cut / max(len(lengths), 1), "longest": max(lengths, default=0)}
    if n_cut:
        logging.getLogger(__name__).warning("%d of %d SFT samples are longer than %d tokens (the longest %d) and lose "
                                            "the start of their prompt", n_cut, len(lengths), max_length, out["longest"])
    if out["cut_share"] > max_share:
        raise ValueError(
            f"{n_cut} of {len(lengths)} SFT samples ({out['cut_share']:.1%}) are longer than {max_length} tokens (the "
            f"longest {out['longest']}) and would lose the start of their prompt, the task with it: raise sft.max_length "
            f"and model.max_position_embeddings, or shorten the prompt (env.obs_chars, env.history); "
            f"sft.max_cut_share={max_share} allows more")
    return out

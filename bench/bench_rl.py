"""RL throughput: our trainer vs TRL's GRPOTrainer, same tiny model, same TextWorld games, same batch.

Rows (each ``--steps`` updates of ``--tasks`` tasks × ``--group`` rollouts, TextWorld coin_collector
level 5, ``--max-steps`` turns, constrained decoding over the admissible commands, one CPU thread):

* ``talentrl``      — ``rl/trainer.py`` as designed: routing distribution over the talent menu, 2 talent
                      arms of group/2 matched rollouts, per-step execution samples + routing samples.
* ``talentrl-noskip`` — the same with ``rl.skip_zero_advantage=false``: every sample runs forward/backward, also
                      those whose advantage is 0 (same weights bitwise; the ratio is the skip's saving).
* ``talentrl-flat`` — the flat-skill GRPO baseline (one arm, no routing samples).
* ``talentrl-flat-noshare`` — the same with ``rl.share_prefix=false``: every row of a micro-batch reads its whole
                      prompt, instead of the micro-batch's common prefix read once (the ratio is that saving).
* ``trl-grpo``      — ``trl.GRPOTrainer`` with a multi-turn ``rollout_func`` (TRL 1.16, experimental): each
                      rollout is one growing conversation (first user turn = the same prompt ours sees,
                      then ``Obs/Admissible`` user turns), generated with ``model.generate`` (TRL's
                      non-vLLM path) batched over the live episodes, constrained with
                      ``prefix_allowed_tokens_fn`` over the same token trie; environment tokens masked
                      with ``env_mask``; reward = the episode return through a reward function.

What differs by design, so read the ratios with it: ours trains one sample per turn (the prompt is
re-read each turn, with a 1-turn history window) and recomputes log-probs under the decoding mask;
TRL trains one sequence per rollout (the whole conversation, read once) and recomputes unmasked
log-probs. "update tokens/s" counts the real (non-pad) tokens that go through forward + backward.

    HOME=/tmp/rlhome python bench/bench_rl.py            # ~2-3 min on 2 shared cores
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BANK = json.loads((ROOT / "tests" / "fixtures" / "textworld_bank.json").read_text())  # three talents, three skills


def ours(args, cfg, family, knowledge, model_dir, out: Path, flat: bool, **rl):
    """Our trainer for ``args.steps`` updates; ``rl``: RLConfig fields to change (the ablation rows)."""
    import dataclasses

    from talentrl_core.rl.trainer import RLTrainer

    cfg = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl.as_flat_baseline() if flat else cfg.rl, **rl))
    tr = RLTrainer(cfg, family, knowledge, model_dir, out, progress=False)
    rows = []
    for step in range(args.steps):
        m = tr.train_step(step)
        rows.append({
            "rollout_s": m["perf/rollout_s"], "update_s": m["perf/update_s"], "step_s": m["perf/step_s"],
            "env_steps": m["perf/env_steps_per_s"] * m["perf/rollout_s"],
            "gen_tokens": m["perf/gen_tokens_per_s"] * m["perf/rollout_s"],
            "update_tokens": m["perf/tokens_per_s"] * m["perf/update_s"], "reward": m["rollout/reward"],
        })
    return summarise(rows), tr


class MultiTurnRollout:
    """TRL's ``rollout_func`` for TextWorld: one growing conversation per rollout, generated with
    ``model.generate`` batched over the live episodes and constrained to the admissible commands."""

    def __init__(self, cfg, family, knowledge, tok, by_key: dict):
        self.cfg, self.family, self.knowledge, self.tok, self.by_key = cfg, family, knowledge, tok, by_key
        self.tries: dict = {}
        self.stats = {"rollout_s": [], "env_steps": [], "gen_tokens": [], "update_tokens": [], "reward": []}

    def trie(self, allowed):
        from talentrl_core.generation import completion_trie

        key = tuple(allowed)
        if key not in self.tries:
            self.tries[key] = completion_trie(self.tok, allowed)
        return self.tries[key]

    def _start(self, prompts) -> tuple[list, list, list]:
        """(environments, admissible lists, prompt ids): the flat context, as talentrl-flat sees it."""
        from talentrl_core.prompts import ExecContext, execution_messages
        from talentrl_core.rl.samples import chat_prompt_ids

        envs, adm, prompt_ids = [], [], []
        for p in prompts:
            task = self.by_key[p[-1]["content"]]
            env = self.family.make()
            obs = env.reset(task)
            goal = env.goal()
            envs.append(env)
            adm.append(env.admissible_actions())
            ctx = self.knowledge.context("textworld", goal, task.task_type, None)
            msgs = execution_messages(ExecContext(env="textworld", goal=goal, observation=obs, skills=ctx.skills,
                                                  admissible=adm[-1], obs_chars=self.cfg.env.obs_chars))
            prompt_ids.append(chat_prompt_ids(self.tok, msgs))
        return envs, adm, prompt_ids

    def _generate(self, model, inputs: list[list[int]], allowed: list[list[str]]) -> tuple[list[list[int]], list[list[float]]]:
        """One constrained sampled completion per (left-padded) input: token ids (to EOS) and their log-probs."""
        import torch

        from talentrl_core.policies import action_completions

        eos, pad = self.tok.eos_token_id, self.tok.pad_token_id
        L = max(len(x) for x in inputs)
        ids = torch.full((len(inputs), L), pad, dtype=torch.long)
        att = torch.zeros((len(inputs), L), dtype=torch.long)
        for r, x in enumerate(inputs):
            ids[r, L - len(x):] = torch.tensor(x)
            att[r, L - len(x):] = 1
        row_tries = [self.trie(action_completions("textworld", a)) for a in allowed]

        def allowed_fn(batch_id, input_ids):
            return row_tries[batch_id].allowed(input_ids[L:].tolist()) or [eos]

        out = model.generate(input_ids=ids, attention_mask=att, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             max_new_tokens=self.cfg.model.max_new_tokens, prefix_allowed_tokens_fn=allowed_fn,
                             output_scores=True, return_dict_in_generate=True, pad_token_id=pad, eos_token_id=eos)
        logp = torch.stack([torch.log_softmax(s.float(), -1) for s in out.scores], 1)  # (B, T, V) processed scores
        toks_out, lps_out = [], []
        for r, row in enumerate(out.sequences[:, L:].tolist()):
            toks = row[: row.index(eos) + 1] if eos in row else row
            toks_out.append(toks)
            lps_out.append([float(logp[r, t, tok_id]) for t, tok_id in enumerate(toks)])
        return toks_out, lps_out

    def _user_turn(self, observation: str, admissible: list[str]) -> list[int]:
        from talentrl_core.prompts import _cut

        acts = ", ".join(a for a in admissible if a not in ("look", "inventory"))
        user = (f"\n<|im_start|>user\nObs: {_cut(observation, self.cfg.env.obs_chars)}\nAdmissible: {acts}<|im_end|>\n"
                "<|im_start|>assistant\n")
        return self.tok(user, add_special_tokens=False)["input_ids"]

    def __call__(self, prompts, trainer) -> dict:
        import torch

        from talentrl_core.prompts import parse_action

        t0 = time.perf_counter()
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        model.eval()
        n, eos, max_steps = len(prompts), self.tok.eos_token_id, self.cfg.env.max_steps
        envs, adm, prompt_ids = self._start(prompts)
        comp, mask, lps, rew, done = [[] for _ in range(n)], [[] for _ in range(n)], [[] for _ in range(n)], [0.0] * n, [False] * n
        n_env, n_gen = 0, 0
        for turn in range(max_steps):
            live = [i for i in range(n) if not done[i]]
            if not live:
                break
            with torch.no_grad():
                new, new_lp = self._generate(model, [prompt_ids[i] + comp[i] for i in live], [adm[i] for i in live])
            for i, toks, lp in zip(live, new, new_lp):
                n_gen += len(toks)
                comp[i], mask[i], lps[i] = comp[i] + toks, mask[i] + [1] * len(toks), lps[i] + lp
                res = envs[i].step(parse_action(self.tok.decode(toks[:-1] if toks and toks[-1] == eos else toks)) or "look")
                n_env += 1
                rew[i] += res.reward
                adm[i] = envs[i].admissible_actions()
                done[i] = res.done or turn == max_steps - 1
                if not done[i]:
                    env_ids = self._user_turn(res.observation, adm[i])
                    comp[i], mask[i], lps[i] = comp[i] + env_ids, mask[i] + [0] * len(env_ids), lps[i] + [0.0] * len(env_ids)
        for e in envs:
            e.close()
        model.train(was_training)
        for key, value in (("rollout_s", time.perf_counter() - t0), ("env_steps", n_env), ("gen_tokens", n_gen),
                           ("update_tokens", sum(len(p) + len(c) for p, c in zip(prompt_ids, comp))), ("reward", sum(rew) / n)):
            self.stats[key].append(value)
        return {"prompt_ids": prompt_ids, "completion_ids": comp, "logprobs": lps, "env_mask": mask, "env_reward": rew}


def trl(args, cfg, family, knowledge, model_dir, out: Path, step_tasks: list) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from talentrl_core.models import load_tokenizer

    tok = load_tokenizer(model_dir)
    tok.padding_side = "left"
    rollout = MultiTurnRollout(cfg, family, knowledge, tok, {t.key: t for ts in step_tasks for t in ts})
    rows = [{"prompt": [{"role": "user", "content": t.key}]} for ts in step_tasks for t in ts]

    def env_reward(prompts, completions, env_reward, **kw):
        return [float(r) for r in env_reward]

    step_s = []

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            step_s.append(time.perf_counter() - self.t)

    G = args.group
    gargs = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=args.tasks * G, num_generations=G, max_steps=args.steps,
        learning_rate=cfg.rl.lr, beta=0.0, logging_steps=1, report_to="none", use_cpu=True, shuffle_dataset=False,
        max_completion_length=4096, save_strategy="no", disable_tqdm=True, seed=0, dataloader_num_workers=0,
        temperature=1.0, max_grad_norm=cfg.rl.max_grad_norm, lr_scheduler_type="linear",
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    trainer = GRPOTrainer(model=model, reward_funcs=env_reward, args=gargs, train_dataset=Dataset.from_list(rows),
                          processing_class=tok, rollout_func=rollout, callbacks=[Clock()])
    trainer.train()
    st = rollout.stats
    return summarise([{"rollout_s": st["rollout_s"][k], "update_s": step_s[k] - st["rollout_s"][k], "step_s": step_s[k],
                       "env_steps": st["env_steps"][k], "gen_tokens": st["gen_tokens"][k],
                       "update_tokens": st["update_tokens"][k], "reward": st["reward"][k]} for k in range(len(step_s))])


def summarise(rows: list[dict]) -> dict:
    tot = {k: sum(r[k] for r in rows) for k in rows[0]}
    n = len(rows)
    return {
        "steps": n,
        "env_steps_per_s": tot["env_steps"] / tot["rollout_s"],
        "gen_tokens_per_s": tot["gen_tokens"] / tot["rollout_s"],
        "update_tokens_per_s": tot["update_tokens"] / tot["update_s"],
        "rollout_s_per_step": tot["rollout_s"] / n,
        "update_s_per_step": tot["update_s"] / n,
        "step_s": tot["step_s"] / n,
        "env_steps_per_step": tot["env_steps"] / n,
        "update_tokens_per_step": tot["update_tokens"] / n,
        "update_ms_per_env_step": 1000 * tot["update_s"] / max(tot["env_steps"], 1),
        "mean_reward": tot["reward"] / n,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--tasks", type=int, default=2, help="tasks per update")
    p.add_argument("--group", type=int, default=8, help="rollouts per task")
    p.add_argument("--max-steps", type=int, default=10, help="turns per episode")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cache-dir", default=os.environ.get("TALENTRL_BENCH_CACHE", str(ROOT / "artifacts" / "cache")))
    p.add_argument("--work", default="", help="scratch folder (default: a temporary one)")
    p.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    torch.set_num_threads(args.threads)
    from talentrl_core.config import EnvConfig, ModelConfig, RLConfig, TalentRLConfig, TrackerConfig
    from talentrl_core.envs.textworld.family import TextWorldFamily
    from talentrl_core.models import build_tiny
    from talentrl_core.rl.static_knowledge import StaticKnowledge

    work = Path(args.work or tempfile.mkdtemp(prefix="bench-rl-"))
    # max_position_embeddings 2048: TRL's rollouts are whole conversations (up to max_steps turns).
    mcfg = ModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, intermediate_size=64,
                       vocab_size=600, max_position_embeddings=2048, device="cpu", max_new_tokens=16)
    model_dir = work / "tiny"
    if not (model_dir / "config.json").exists():
        build_tiny(mcfg, model_dir, args.data_dir)
    env = EnvConfig(challenges=["tw-coin_collector"], challenge_settings="level=5", train_seeds=[1, 4], max_steps=args.max_steps,
                    history=1, obs_chars=150, cache_dir=args.cache_dir)
    family = TextWorldFamily(env, args.cache_dir)
    family.prepare(family.tasks("train"), workers=2, progress=False)
    rl = RLConfig(steps=args.steps, tasks_per_step=args.tasks, group_size=args.group, n_arms=2, lr=1e-3, checkpoint_every=0,
                  micro_batch_size=16, rollout_batch_size=64)
    cfg = TalentRLConfig(experiment="bench", artifacts_dir=str(work), env=env, model=mcfg, rl=rl, tracker=TrackerConfig(mode="disabled"))
    knowledge = StaticKnowledge.from_dict(BANK)

    results = {}
    t0 = time.time()
    results["talentrl"], tr = ours(args, cfg, family, knowledge, str(model_dir), work / "ours", flat=False)
    step_tasks = []
    for s in range(args.steps):  # the very tasks our trainer drew, step by step, in order
        tr.step_tasks(s)
        step_tasks.append(list(tr.step_all_tasks))
    results["talentrl-noskip"], _ = ours(args, cfg, family, knowledge, str(model_dir), work / "noskip", flat=False,
                                          skip_zero_advantage=False)
    results["talentrl-flat"], _ = ours(args, cfg, family, knowledge, str(model_dir), work / "flat", flat=True)
    results["talentrl-flat-noshare"], _ = ours(args, cfg, family, knowledge, str(model_dir), work / "flat-noshare",
                                               flat=True, share_prefix=False)
    results["trl-grpo"] = trl(args, cfg, family, knowledge, str(model_dir), work / "trl", step_tasks)
    wall = time.time() - t0

    cols = [("env_steps_per_s", "rollout env-steps/s"), ("gen_tokens_per_s", "gen tok/s"), ("update_tokens_per_s", "update tok/s"),
            ("rollout_s_per_step", "rollout s/step"), ("update_s_per_step", "update s/step"), ("env_steps_per_step", "env steps/step"),
            ("update_tokens_per_step", "update tok/step"), ("update_ms_per_env_step", "update ms/env-step"), ("mean_reward", "reward")]
    print(f"\nRL throughput — tiny Qwen2 32x2, TextWorld coin_collector L5, {args.steps} updates x {args.tasks} tasks x "
          f"{args.group} rollouts, max {args.max_steps} turns, {args.threads} thread(s); bench wall {wall:.0f} s\n")
    print("| trainer | " + " | ".join(c[1] for c in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name, r in results.items():
        print(f"| {name} | " + " | ".join(f"{r[k]:.3g}" if k != "mean_reward" else f"{r[k]:.3f}" for k, _ in cols) + " |")
    print("\nratios vs trl-grpo (higher is better for rates, lower for s/step):")
    for name in ("talentrl", "talentrl-flat"):
        r, b = results[name], results["trl-grpo"]
        print(f"  {name:14s} rollout env-steps/s x{r['env_steps_per_s'] / b['env_steps_per_s']:.2f}   "
              f"update tok/s x{r['update_tokens_per_s'] / b['update_tokens_per_s']:.2f}   "
              f"update ms/env-step x{r['update_ms_per_env_step'] / b['update_ms_per_env_step']:.2f}")
    r, b = results["talentrl"], results["talentrl-noskip"]
    print(f"  zero-advantage skip (talentrl-noskip / talentrl, same rollouts and weights): update s/step "
          f"x{b['update_s_per_step'] / max(r['update_s_per_step'], 1e-9):.2f}, update tokens skipped "
          f"{1 - r['update_tokens_per_step'] / max(b['update_tokens_per_step'], 1e-9):.0%} (the share grows with arms "
          "that succeed or fail as a whole; the first row also pays the process's warm-up)")
    r, b = results["talentrl-flat"], results["talentrl-flat-noshare"]
    print(f"  shared prompt prefix (talentrl-flat-noshare / talentrl-flat, same rollouts): update s/step "
          f"x{b['update_s_per_step'] / max(r['update_s_per_step'], 1e-9):.2f}, update tokens read "
          f"{r['update_tokens_per_step'] / max(b['update_tokens_per_step'], 1e-9):.0%} of the full rows'")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "wall_s": wall, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    from pipeline.errors import named_errors  # one named line, not a traceback (TALENTRL_TRACEBACK=1 shows it)

    raise SystemExit(named_errors("bench_rl")(main)())

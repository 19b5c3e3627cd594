"""Every bad configuration value is refused at once, naming the key (and the value or the choices) — never
accepted silently. One row per case; the table in docs/reliability.md is this list."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import ConfigError, load_config

# every file in conf/experiment is a choice; the message lists them all, sorted
EXPERIMENTS = ", ".join(sorted(p.stem for p in (Path(__file__).parents[2] / "conf" / "experiment").glob("*.yaml")))

CASES = [
    # override, what the message must contain
    ("sft.lr=0", "sft.lr=0.0: must be > 0"),
    ("rl.lr=0", "rl.lr=0.0: must be > 0"),
    ("rl.steps=-1", "rl.steps=-1: must be >= 1"),
    ("rl.group_size=1", "rl.group_size=1"),
    ("rl.n_arms=1", "rl.n_arms=1: TalentRL contrasts"),
    ("sft.max_steps=-5", "sft.max_steps=-5: must be >= 1"),
    ("sft.max_steps=0", "sft.max_steps=0"),
    ("env.obs_chars=-1", "env.obs_chars=-1"),
    ("env.history=-1", "env.history=-1: must be >= 0"),
    ("env.max_steps=0", "env.max_steps must be >= 1"),
    ("env.step_timeout_s=0", "env.step_timeout_s=0"),
    ("env.invalid_penalty=1", "env.invalid_penalty"),
    ("env.expert=oracle", "env.expert='oracle': choose handcoded"),
    ("env.retriever=google", "env.retriever='google'"),
    ("env.name=webshopx", "webshopx"),
    ("model.max_position_embeddings=16", "model.max_position_embeddings=16"),
    ("model.vocab_size=10", "model.vocab_size=10"),
    ("model.device=tpu", "model.device='tpu': choose auto"),
    ("model.temperature=-1", "model.temperature=-1"),
    ("model.max_new_tokens=0", "model.max_new_tokens=0"),
    ("model.dtype=int8", "model.dtype='int8'"),
    ("model.compute_dtype=fp8", "model.compute_dtype='fp8'"),
    ("model.decoding=beam", "beam"),
    ("model.num_attention_heads=3", "model.hidden_size must be divisible"),
    ("model.kind=hf", "model.kind=hf needs model.name_or_path"),
    ("collect.n_episodes=-3", "collect.n_episodes=-3"),
    ("collect.random_episodes=-1", "collect.random_episodes=-1"),
    ("collect.workers=0", "collect.workers must be >= 1"),
    ("collect.batch_size=0", "collect.batch_size"),
    ("collect.policy=oracle", "oracle"),
    ("eval.n_per_panel=-1", "eval.n_per_panel=-1"),
    ("eval.avg_k=-1", "eval.avg_k=-1"),
    ("eval.ci=bogus", "eval.ci='bogus': choose wilson or bootstrap"),
    ("eval.max_error_share=2", "eval.max_error_share=2"),
    ("eval.systems=[talentrl,magic]", "eval.systems has unknown ['magic']"),
    ("library.dedup_threshold=1.5", "library.dedup_threshold=1.5"),
    ("library.delta=2", "library.delta is a cosine threshold"),
    ("library.lam=-1", "library.lam=-1"),
    ("library.min_support=0", "library.min_support"),
    ("library.k_specific=-1", "library.k_specific=-1"),
    ("library.n_talents=-2", "library.n_talents=-2"),
    ("library.distiller=teacher", "library.distiller=teacher needs library.teacher_base_url"),
    ("library.teacher_retries=0", "library.teacher_retries"),
    ("sft.batch_size=0", "sft.batch_size=0"),
    ("sft.micro_batch_size=3", "sft.micro_batch_size=3"),
    ("sft.routing_warmup_steps=-5", "sft.routing_warmup_steps=-5"),
    ("sft.routing_warmup_until=0.9", "sft.routing_warmup_until=0.9 needs sft.routing_warmup_steps > 0"),
    ("sft.routing_warmup_until=1.5", "sft.routing_warmup_until=1.5"),
    ("sft.warmup_steps=-1", "sft.warmup_steps=-1"),
    ("sft.weight_decay=-1", "sft.weight_decay=-1"),
    ("sft.max_length=0", "sft.max_length=0"),
    ("sft.save_steps=0", "sft.save_steps=0"),
    ("sft.grad_accum=0", "sft.grad_accum=0"),
    ("rl.clip_eps=-1", "rl.clip_eps=-1"),
    ("rl.beta_kl=-1", "rl.beta_kl=-1"),
    ("rl.ppo_epochs=0", "rl.ppo_epochs=0"),
    ("rl.tasks_per_step=0", "rl.tasks_per_step"),
    ("rl.max_grad_norm=0", "rl.max_grad_norm=0"),
    ("rl.checkpoint_every=-1", "rl.checkpoint_every=-1"),
    ("rl.group_size=7", "rl.group_size"),
    ("rl.exec_group=team", "team"),
    ("keep_previous_runs=-1", "keep_previous_runs=-1: must be >= 0"),
    ("sft.lrr=1", "unknown config key 'sft.lrr'"),
    ("+foo=1", "unknown config key 'foo'"),
    ("+sft.max_stepz=3", "unknown config key 'sft.max_stepz'"),
    ("++rl.stepz=3", "unknown config key 'rl.stepz'"),
    ("experiment=nope", "unknown choice 'nope' for config group 'experiment'; choices: " + EXPERIMENTS),
    ("env=nope", "unknown choice 'nope' for config group 'env'"),
    ("sft.lr=fast", "sft.lr=fast: Value 'fast' of type 'str' could not be converted to Float"),
    # a dict-valued panel setting and the +/++ forms: every entry is checked like the key it replaces
    ("eval.n_by_panel={textworld: -5}", "eval.n_by_panel.textworld=-5: must be a task count"),
    ("+eval.n_by_panel.textworld=-1", "eval.n_by_panel.textworld=-1: must be a task count"),
    ("++eval.n_by_panel={textworld: -1}", "eval.n_by_panel.textworld=-1: must be a task count"),
    ("eval.n_by_panel.textworld=abc", "eval.n_by_panel.textworld=abc: Value 'abc' of type 'str' could not be converted"),
    ("eval.n_by_panel=[1,2]", "eval.n_by_panel is a mapping (dict[str, int]): give eval.n_by_panel={name: value"),
    ("eval.panels={a: b}", "eval.panels is a list (list[str]): give eval.panels=[a,b,...]"),
    ("env.eval_seeds={a: 1}", "env.eval_seeds is a list (list[int])"),
    ("++sft.lr=-1", "sft.lr=-1.0: must be > 0"),
    ("+sft.lr=-1", "+sft.lr=-1: sft.lr is already in the config and a single + only adds new keys; write sft.lr=-1"),
    ("model.backend=openai", "model.backend=openai with model.decoding=constrained: an OpenAI-compatible endpoint takes no"),
]


@pytest.mark.parametrize("override,message", CASES, ids=[c[0] for c in CASES])
def test_bad_value_is_refused_by_name(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(["experiment=demo", override])
    assert message in str(err.value), str(err.value)


def test_the_table_has_at_least_sixty_cases():
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("override", ["eval.n_by_panel={textworld: 7}", "eval.n_by_panel.textworld=7",
                                      "+eval.n_by_panel={textworld: 7}", "++eval.n_by_panel.textworld=7"])
def test_a_panel_mapping_is_accepted_in_every_form(override):
    """A plain override of a dict field (empty and closed in the schema) was refused with Hydra's bare
    "Could not override 'eval.n_by_panel'"."""
    assert load_config(["experiment=demo", override]).eval.n_by_panel == {"textworld": 7}

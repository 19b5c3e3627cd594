"""Every config group and experiment composes into the typed schema; bad keys/values name themselves."""

import dataclasses

import pytest

from pipeline.config import CONF_DIR, ConfigError, load_config
from talentrl_core.config import TalentRLConfig

GROUP_OPTIONS = [
    (group, p.stem)
    for group in ("env", "model", "library", "collect", "sft", "rl", "eval")
    for p in sorted((CONF_DIR / group).glob("*.yaml"))
]
NEEDS = {  # mandatory values (???) a user must give for some options
    ("model", "hf"): ["model.name_or_path=/some/local/model"],
    ("library", "teacher"): ["library.teacher_base_url=http://127.0.0.1:9/v1", "library.teacher_model=m"],
}


@pytest.mark.parametrize("group,option", GROUP_OPTIONS)
def test_every_group_option_composes(group, option):
    cfg = load_config([f"{group}={option}", *NEEDS.get((group, option), [])])
    assert isinstance(cfg, TalentRLConfig)
    # the library gets plain dataclasses, never OmegaConf containers
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        assert not type(v).__module__.startswith("omegaconf"), f.name


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")))
def test_every_experiment_composes(experiment):
    cfg = load_config([f"experiment={experiment}"])
    assert cfg.experiment == experiment
    assert isinstance(cfg.eval.systems, list)


def test_typo_names_the_key_and_choices():
    with pytest.raises(ConfigError) as e:
        load_config(["model.hiden_size=8"])
    msg = str(e.value)
    assert "model.hiden_size" in msg and "hidden_size" in msg


def test_bad_enum_value_lists_choices():
    with pytest.raises(ConfigError, match=r"arm, task"):
        load_config(["rl.exec_group=everything"])


def test_bad_group_choice_lists_choices():
    with pytest.raises(ConfigError, match="alfworld, qa, textworld"):
        load_config(["env=minecraft"])


def test_cross_field_check_says_what_to_change():
    with pytest.raises(ConfigError, match="multiple of rl.n_arms"):
        load_config(["rl.group_size=7", "rl.n_arms=2"])
    for stage in ("sft", "rl"):  # a sitting's budget pauses a run that only a resume can continue
        with pytest.raises(ConfigError, match=rf"{stage}\.max_minutes=30 needs {stage}\.resume=true"):
            load_config([f"{stage}.max_minutes=30", f"{stage}.resume=false"])


def test_interpolations_resolved():
    cfg = load_config(["artifacts_dir=/tmp/x"])
    assert cfg.library.uri == "/tmp/x/library/lancedb"
    assert "${" not in cfg.env.alfworld_archive


def test_per_panel_sizes_override_the_default_and_must_name_a_configured_panel():
    cfg = load_config(["experiment=cpu_full"])
    assert type(cfg.eval.n_by_panel) is dict
    assert cfg.eval.panel_size("alfworld_valid_unseen") == 30
    assert cfg.eval.panel_size("textworld") == cfg.eval.n_per_panel == 100
    with pytest.raises(ConfigError, match=r"qa_nq.*not in eval.panels"):
        load_config(["+eval.n_by_panel.qa_nq=5"])


@pytest.mark.parametrize("override", ["+foo=1", "+sft.max_stepz=3", "++rl.stepz=3", "+nosuch.section=1"])
def test_added_keys_must_exist_in_the_schema(override):
    with pytest.raises(ConfigError, match="unknown config key"):
        load_config([override])


def test_force_override_of_a_known_key_is_allowed():
    assert load_config(["++sft.max_steps=7"]).sft.max_steps == 7


@pytest.mark.parametrize("override,named", [
    ("sft.lr=0", "sft.lr"), ("rl.lr=0", "rl.lr"), ("rl.steps=-1", "rl.steps"), ("sft.max_steps=-5", "sft.max_steps"),
    ("env.obs_chars=-1", "env.obs_chars"), ("env.history=-1", "env.history"), ("collect.n_episodes=-3", "collect.n_episodes"),
    ("eval.n_per_panel=-1", "eval.n_per_panel"), ("library.dedup_threshold=1.5", "library.dedup_threshold"),
    ("model.vocab_size=10", "model.vocab_size"), ("model.max_position_embeddings=16", "model.max_position_embeddings"),
    ("sft.batch_size=0", "sft.batch_size"),
])
def test_out_of_range_values_are_refused_by_name(override, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config([override])


@pytest.mark.parametrize("overrides,named", [
    (["env.routing_cue=x"], "needs a group"),
    (["env.routing_cue='(x'", "env.routing_cue_values=[a,b]"], "not a regular expression"),
    (["env.routing_cue='(x)'", "env.routing_cue_values=[a,b]"], r"env\.routing_obs_chars > 0"),
    (["env.routing_cue='(x)'", "env.routing_cue_values=[a]", "env.routing_obs_chars=50"], "at least two distinct"),
    (["env.routing_cue_values=[a,b]"], r"needs env\.routing_cue"),
    (["sft.routing_target=cue_only"], r"set env\.routing_cue"),
    (["sft.routing_target=cue"], "cue_only"),
])
def test_a_routing_cue_setting_that_cannot_work_is_refused_by_name(overrides, named):
    """Recognise, then route (issue 38, A2): env.routing_cue, env.routing_cue_values, sft.routing_target."""
    with pytest.raises(ConfigError, match=named):
        load_config(overrides)


def test_a_group_of_one_per_arm_is_refused():
    with pytest.raises(ConfigError, match="group of one"):
        load_config(["rl.group_size=1", "rl.n_arms=1", "rl.flat_baseline=true"])


def test_each_env_yaml_is_its_family_settings_and_panels_of_another_family_use_them():
    """conf/env/<name>.yaml and config.FAMILY_SETTINGS say the same, and an evaluation panel of another family runs
    with its family's settings (cpu_full's ALFWorld panels ran the dataclass's 30 steps, not alfworld.yaml's 50)."""
    from pathlib import Path

    import yaml

    from pipeline.config import load_config
    from talentrl_core.config import FAMILY_SETTINGS
    from talentrl_core.evaluation.runner import panel_env

    conf = Path(__file__).resolve().parents[1] / "conf" / "env"
    for f in sorted(conf.glob("*.yaml")):
        assert yaml.safe_load(f.read_text()) == {"name": f.stem, **FAMILY_SETTINGS[f.stem]}, f
    cfg = load_config(["experiment=cpu_full"])
    env, split = panel_env(cfg, "alfworld_valid_seen")
    assert (env.max_steps, env.expert, env.obs_chars, split) == (50, "handcoded", 300, "valid_seen")
    assert panel_env(cfg, "textworld")[0] is cfg.env


def _leaves(d: dict, prefix: str = ""):
    """(dotted key, value) of every setting a conf file gives (a schema field holding a dict is one leaf)."""
    from pipeline.config import _fields_of

    for k, v in d.items():
        if k in ("defaults", "hydra"):
            continue
        key = f"{prefix}{k}"
        if isinstance(v, dict) and _fields_of(key) is not None:
            yield from _leaves(v, key + ".")
        else:
            yield key, v


def _nest(key: str, value) -> dict:
    head, _, rest = key.partition(".")
    return {head: _nest(rest, value) if rest else value}


def test_conf_gives_only_what_differs_from_the_schema():
    """YAML only for what differs: a group option sets no key to the dataclass default (an env option still names its
    family), an experiment none to the value it would inherit anyway (from the groups and experiments it builds on)."""
    import shutil
    import tempfile
    from pathlib import Path

    import yaml
    from omegaconf import OmegaConf

    from pipeline.config import compose

    defaults = OmegaConf.structured(TalentRLConfig)
    same = []
    for group in ("env", "model", "library", "collect", "sft", "rl", "eval"):
        for f in sorted((CONF_DIR / group).glob("*.yaml")):
            for key, v in _leaves(yaml.safe_load(f.read_text()) or {}, group + "."):
                if key != "env.name" and v != "???" and OmegaConf.merge(defaults, OmegaConf.create(_nest(key, v))) == defaults:
                    same.append(f"{f.relative_to(CONF_DIR)}: {key}")
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "conf"
        shutil.copytree(CONF_DIR, bare)
        for f in sorted((CONF_DIR / "experiment").glob("*.yaml")):
            text = f.read_text()
            given = yaml.safe_load(text) or {}
            header = "# @package _global_\n" if "@package _global_" in text else ""
            keep = {k: given[k] for k in ("defaults", "experiment") if k in given}
            (bare / "experiment" / f.name).write_text(header + yaml.safe_dump(keep))
            full = compose([f"experiment={f.stem}"])
            inherited = compose([f"experiment={f.stem}"], config_dir=bare)
            (bare / "experiment" / f.name).write_text(text)
            for key, _ in _leaves(given):
                if key != "experiment" and OmegaConf.select(full, key) == OmegaConf.select(inherited, key):
                    same.append(f"experiment/{f.name}: {key}")
    assert not same, "conf keys that repeat what the schema (or the inherited config) already gives: " + ", ".join(same)

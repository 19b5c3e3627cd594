"""The family registry (``talentrl_core/envs/registry.py``): one entry per ``EnvName``, everything the pipeline needs of
a family reachable through it, and no family named anywhere else in the package but where a reason is given."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from talentrl_core import prompts
from talentrl_core.config import EnvConfig, EnvName, TalentRLConfig
from talentrl_core.envs import make_family, registry
from talentrl_core.envs.base import EnvFamily, FamilySpec, StepResult, Task
from talentrl_core.evaluation.runner import panel_env
from talentrl_core.library import distill_teacher, templates

PKG = Path(__file__).resolve().parents[1] / "talentrl_core"

ALLOWED_LITERALS = {  # module → the family-name string constants it may hold, and why
    "config/env.py": ("EnvName's members and FAMILY_SETTINGS' keys (conf/env/<name>.yaml mirrored; config must not "
                      "import envs)", {"alfworld": 2, "textworld": 2, "qa": 2, "webshop": 2}),
    "config/evaluation.py": ("EvalConfig's default panel (textworld)", {"textworld": 1}),
    "library/examples.py": ("hand-written example trajectories of each family (test and demo data, not dispatch)",
                            {"alfworld": 1, "textworld": 2, "qa": 1}),
    "evaluation/metrics.py": ("SCORE_PANELS = ('webshop',): registry.reports_score would replace it, but it answers "
                              "True for webshop_dev too, which would add a score to that panel's metrics",
                              {"webshop": 1}),
}


def test_every_env_name_has_exactly_one_family_and_back():
    assert sorted(registry.FAMILIES) == sorted(e.value for e in EnvName)
    assert len(registry.FAMILY_PACKAGES) == len(set(registry.FAMILY_PACKAGES)) == len(EnvName)
    for name, spec in registry.FAMILIES.items():
        assert spec.name == name and spec.rule and spec.description and spec.panel_help


def test_lookups_match_the_texts_before_the_registry():
    assert list(prompts.RULES) == ["alfworld", "textworld", "webshop", "qa"]  # the tiny tokenizer reads them in order
    assert prompts.format_action("qa", "<answer>x</answer>", "t") == "<think>t</think><answer>x</answer>"
    assert prompts.format_action("alfworld", "look") == "<action>look</action>"
    assert prompts.parse_for_env("qa", "<search> a  b </search>") == "<search>a b</search>"
    assert prompts.parse_for_env("textworld", "<action> go  east </action>") == "go east"
    assert templates.abstract_action("alfworld", "open drawer 1") == "open {recep}"
    assert templates.abstract_action("textworld", "open drawer") == "open {obj}"
    assert distill_teacher.env_description("qa").startswith("search-augmented question answering")
    cfg = TalentRLConfig()
    assert [panel_env(cfg, p)[1] for p in ("textworld", "webshop", "alfworld_valid_seen", "qa_nq")] == \
        ["eval", "test", "valid_seen", "nq"]
    assert registry.reports_score("webshop") and not registry.reports_score("textworld")
    with pytest.raises(ValueError, match="unknown eval panel"):
        panel_env(cfg, "nowhere")


class _ToyEnv:
    name = "toy"

    def reset(self, task: Task) -> str:
        return "a toy room"

    def goal(self) -> str:
        return "say hi"

    def step(self, action: str) -> StepResult:
        return StepResult("ok", 1.0, True, action == "!hi")

    def admissible_actions(self):
        return None

    def expert_action(self):
        return "!hi"

    def close(self) -> None:
        pass


class _ToyFamily(EnvFamily):
    name = "toy"

    def __init__(self, cfg, cache_dir: Path) -> None:
        self.cache_dir = cache_dir

    def tasks(self, split: str, n: int = 0, seed: int = 0) -> list[Task]:
        return [Task("toy", split, "greet", "k0")]

    def make(self) -> _ToyEnv:
        return _ToyEnv()

    def task_types(self) -> list[str]:
        return ["greet"]


TOY = FamilySpec(
    name="toy", factory=_ToyFamily, rule="Say hi with !hi.", description="a toy family",
    panels={"toy_panel": "eval"}, panel_help=("toy_panel",),
    parse=lambda c: c.strip() if c.strip().startswith("!") else None, wrap=lambda a: a,
    template=lambda a: "greet" if a.startswith("!") else "(invalid command)",
)


def test_one_registry_entry_makes_a_family_usable(monkeypatch, tmp_path):
    monkeypatch.setitem(registry.FAMILIES, "toy", TOY)  # the one line a new family adds
    cfg = EnvConfig()
    object.__setattr__(cfg, "name", "toy")
    fam = make_family(cfg, tmp_path)
    (task,) = fam.tasks("eval")
    assert fam.prepare([task], workers=2) == {}  # the protocol's no-op default: nobody probes with hasattr
    env = fam.make()
    env.reset(task)
    assert env.step(prompts.parse_for_env("toy", " !hi ")).won
    assert prompts.rule_for("toy") == "Say hi with !hi." and prompts.RULES["toy"] == "Say hi with !hi."
    assert prompts.execution_messages(prompts.ExecContext(env="toy", goal="say hi", observation="room"))[0] == \
        {"role": "system", "content": "Say hi with !hi."}
    assert prompts.format_action("toy", "!hi") == "!hi"
    assert templates.abstract_action("toy", "!hi") == "greet"
    assert distill_teacher.env_description("toy") == "a toy family"
    run = TalentRLConfig()
    object.__setattr__(run.env, "name", "toy")
    assert panel_env(run, "toy_panel") == (run.env, "eval")


def _family_literals() -> dict[str, dict[str, int]]:
    names = {e.value for e in EnvName}
    out: dict[str, dict[str, int]] = {}
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG).as_posix()
        if rel.startswith("envs/"):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                out.setdefault(rel, {}).setdefault(node.value, 0)
                out[rel][node.value] += 1
    return out


def test_family_names_outside_envs_only_where_allowed():
    found = _family_literals()
    allowed = {mod: counts for mod, (_, counts) in ALLOWED_LITERALS.items()}
    extra = {mod: c for mod, c in found.items() if any(n > allowed.get(mod, {}).get(k, 0) for k, n in c.items())}
    assert not extra, f"family names hard-coded outside envs/ (look the family up in envs.registry instead): {extra}"
    assert sum(n for c in found.values() for n in c.values()) <= 14

"""The environment protocol every family implements (DESIGN.md §2).

A *task* is a deterministic, serialisable description of one episode's initial state (a game file, a
generated-game seed, a question). Every member of a rollout group resets from the same ``Task`` and so
starts from the same state. ``step`` takes the already-parsed action text; the rollout loop turns an
unparseable completion into an invalid action before it reaches the env.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Protocol, Sequence, runtime_checkable

from .syntax import action_tag, parse_action

if TYPE_CHECKING:
    from ..config import EnvConfig

INVALID_ACTION_OBS = "Invalid action: write exactly one <action>...</action> with an admissible command."


@dataclass(frozen=True)
class Task:
    env: str
    "Family name: alfworld, textworld or qa."
    split: str
    "train, valid_seen, valid_unseen, eval, or a QA set name."
    task_type: str
    "Task type (ALFWorld's 6 types, the TextWorld challenge, the QA source set)."
    key: str
    "What identifies the initial state inside the family: a game path, a seed, a question id."
    payload: dict = field(default_factory=dict, compare=False, hash=False)
    "Extra data the env needs (question text, answers, paragraphs...). JSON-serialisable."

    @property
    def task_id(self) -> str:
        """Deterministic id: stable across machines and runs (no absolute paths in ``key``)."""
        h = hashlib.sha1(f"{self.env}|{self.split}|{self.key}".encode()).hexdigest()[:12]
        return f"{self.env}-{self.split}-{h}"

    def to_json(self) -> str:
        return json.dumps(
            {"env": self.env, "split": self.split, "task_type": self.task_type, "key": self.key, "payload": self.payload},
            sort_keys=True,
        )

    @staticmethod
    def from_json(s: str) -> "Task":
        d = json.loads(s)
        return Task(d["env"], d["split"], d["task_type"], d["key"], d.get("payload", {}))


@dataclass
class StepResult:
    observation: str
    reward: float
    done: bool
    won: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Env(Protocol):
    """One live episode at a time. Instances are cheap to keep; ``reset`` may be slow."""

    name: str

    def reset(self, task: Task) -> str:
        """Start ``task``; return the first observation (including the goal text)."""

    def goal(self) -> str:
        """The task instruction the agent must accomplish (shown in every prompt)."""

    def step(self, action: str) -> StepResult:
        """Apply a text action. An inadmissible action is not an error: the env says so and ``info['valid']`` is False."""

    def admissible_actions(self) -> Optional[list[str]]:
        """Commands valid now, or None when the family has an open action space (QA)."""

    def expert_action(self) -> Optional[str]:
        """The expert's next command (already in the family's action syntax), or None if none."""

    def close(self) -> None: ...


class EnvFamily(Protocol):
    """Lists tasks and makes env instances for one family. Families subclass it to inherit ``prepare``."""

    name: str

    def tasks(self, split: str, n: int = 0, seed: int = 0) -> list[Task]:
        """Tasks of a split in a fixed order; ``n > 0`` takes a seeded subset (same seed, same subset)."""

    def make(self) -> Env: ...

    def task_types(self) -> list[str]: ...

    def prepare(self, tasks: Sequence[Task], workers: int = 1, progress: bool = True) -> dict[str, float]:
        """Build what ``tasks`` need before their episodes run (TextWorld generates missing games in parallel);
        returns seconds per built item. Nothing to build by default."""
        return {}


def lazy_family(target: str) -> Callable[["EnvConfig", Path], "EnvFamily"]:
    """A ``FamilySpec.factory`` that imports ``"package.module:Class"`` only when a family is made, so that reading the
    registry loads none of a family's dependencies."""
    module, _, name = target.partition(":")

    def factory(cfg: "EnvConfig", cache_dir: Path) -> "EnvFamily":
        import importlib

        return getattr(importlib.import_module(module), name)(cfg, cache_dir)

    return factory


@dataclass(frozen=True)
class FamilySpec:
    """Everything the pipeline knows about one family, in one place (``envs/registry.py`` lists them): nothing
    outside ``envs/`` branches on a family's name."""

    name: str
    "The ``EnvName`` value."
    factory: Callable[["EnvConfig", Path], EnvFamily]
    "``(env config, cache dir) → family``; imports the family's dependencies only when called."
    rule: str
    "The system rule of every policy prompt (``prompts.rule_for``)."
    description: str
    "What the teacher distiller is told about the environment (``library.distill_teacher``)."
    panels: Mapping[str, str] = field(default_factory=dict)
    "Evaluation panels of fixed names: panel → split (``evaluation.runner.panel_env``)."
    panel_prefix: str = ""
    "Panels named ``<prefix><split>`` (e.g. ``qa_<set>``); empty: only ``panels``."
    panel_help: tuple[str, ...] = ()
    "How the panels are named, for the error on an unknown panel."
    parse: Callable[[str], Optional[str]] = parse_action
    "Completion → action text (None: unparseable)."
    wrap: Callable[[str], str] = action_tag
    "Expert action → the completion that writes it (SFT labels, after an optional ``<think>``)."
    template: Optional[Callable[[str], str]] = None
    "Normalised command → its abstract template, for families with their own action syntax; None: the generic "
    "verb/preposition templates of ``library.templates``."
    recep_verbs: frozenset = frozenset()
    "Generic templates: verbs whose object is a receptacle (``go to {recep}``, ALFWorld's ``open {recep}``)."
    with_recep_verbs: frozenset = frozenset()
    "Generic templates: verbs whose ``with`` phrase is a receptacle (ALFWorld's ``heat {obj} with {recep}``)."
    data_fields: tuple[str, ...] = ()
    "``EnvConfig`` fields naming the family's data files: a panel of this family run from another family's config "
    "keeps them."
    strategies: Optional[str] = None
    "Module whose import registers the family's strategy experts (``envs.strategies``); None: none."
    memory: Optional[Callable[[str, Sequence[tuple[str, str]], str, Optional[Sequence[str]]], str]] = None
    "``(goal, past (observation, action) pairs, current observation, admissible commands) → one line`` of what the "
    "agent's own past and page say (``env.memory``: ALFWorld's searched / not yet searched receptacles, WebShop's "
    "item page restated); None: the family has none."
    memory_goal: Optional[Callable[[str, Sequence[tuple[str, str]], str, Optional[Sequence[str]]], str]] = None
    "The memory line with the task's words beside the page's (``env.memory_goal``: WebShop's wanted option values "
    "and price bound); None: the family has none."
    memory_goal_command: Optional[Callable[[str, Sequence[tuple[str, str]], str, Optional[Sequence[str]]], str]] = None
    "``memory_goal`` with the task's values spelled as the family's commands spell them (``env.memory_values=command``: "
    "WebShop's ``(task: [small])``); None: the family has none."
    procedure_of: Optional[Callable[[str], Optional[str]]] = None
    "Task type → the procedure it asks for (``library.talents_by=procedure``: one talent per procedure); None: none."
    procedures: Optional[str] = None
    "Module whose ``DESCRIPTIONS`` (procedure → what it does) start each procedure talent's strategy text."
    decision_detail: Optional[Callable[[str, str], Optional[str]]] = None
    "``(goal, the teacher's command) → a finer class`` of that decision, its own row in the per-decision accuracy "
    "(``evaluation.decisions``; WebShop: the option group an option click sets); None: the family has none."
    reports_score: bool = False
    "Return rule: every family's return is the sum of its step rewards (invalid penalties included); a family "
    "that reports a score (mean final reward x 100, WebShop) shows it beside the success rate."

    def panel_split(self, panel: str) -> Optional[str]:
        """The split of ``panel`` when it is one of this family's panels, else None."""
        if panel in self.panels:
            return self.panels[panel]
        if self.panel_prefix and panel.startswith(self.panel_prefix):
            return panel[len(self.panel_prefix):]
        return None

"""Records of the skill/talent library and their Arrow schemas (DESIGN.md §3).

Three data tables and one manifest live in one LanceDB database:

* ``skills``   — one row per skill: ``kind`` ∈ {general, specific, mistake}, the text shown to the policy
  (``title``, ``principle``), ``when_to_apply``, a concrete ``example``, provenance and usage statistics.
* ``talents``  — one row per talent (a named strategy) with weighted links to skills
  (``skill_ids[i]`` has weight ``skill_weights[i]`` ∈ [0, 1]: w(t, s) in retrieval).
* ``labels``   — routing labels: ``kind='traj'`` maps a trajectory (``traj_uid``, ``task_id``) to the
  talent it followed (SFT targets); ``kind='oracle'`` gives the best talent of a task type; ``kind='matrix'``
  holds the measured strategy × task-type success matrix (``strategy_labels.py``).
* ``versions`` — the manifest: library version N → the LanceDB table versions that hold it.

``library_version`` on a row is the library version whose write last changed that row.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, fields
from typing import Optional

import pyarrow as pa

KINDS = ("general", "specific", "mistake")
"Skill kinds, in the order retrieval returns them is specific, general, mistake (see retrieval.py)."

KIND_PREFIX = {"general": "G", "specific": "S", "mistake": "M"}


def content_id(prefix: str, *parts: object) -> str:
    """A short id derived from content: the same content always gets the same id.

    >>> content_id("S", "alfworld", "take {obj} from {recep}")
    'S-ca7c8944'
    """
    h = hashlib.sha1("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:8]
    return f"{prefix}-{h}"


@dataclass
class SkillRecord:
    skill_id: str
    env: str
    kind: str
    task_types: list[str]
    title: str
    principle: str
    when_to_apply: str = ""
    example: str = ""
    source_traj_ids: list[str] = field(default_factory=list)
    n_used: int = 0
    "Rollouts that had this skill in context (evolution bookkeeping)."
    success_with: float = 0.0
    "Success rate of matched rollouts with the skill (set on promotion)."
    success_without: float = 0.0
    "Success rate of matched rollouts without it."
    utility: float = 0.0
    "Estimated success gain from the skill; eviction removes the lowest first (see evolution.py)."
    library_version: int = 0
    vector: Optional[list[float]] = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"skill {self.skill_id}: kind {self.kind!r} is not one of {KINDS}")

    def text(self) -> str:
        """The text that is embedded (what retrieval compares the query with)."""
        return f"{self.title}. {self.principle} {self.when_to_apply}".strip()

    def content(self) -> dict:
        """Everything except the bookkeeping version and the vector (for equality and change checks)."""
        d = asdict(self)
        d.pop("library_version")
        d.pop("vector")
        return d


@dataclass
class TalentRecord:
    talent_id: str
    env: str
    name: str
    strategy: str
    when_to_apply: str = ""
    skill_ids: list[str] = field(default_factory=list)
    skill_weights: list[float] = field(default_factory=list)
    library_version: int = 0
    vector: Optional[list[float]] = None

    def __post_init__(self) -> None:
        if len(self.skill_ids) != len(self.skill_weights):
            raise ValueError(f"talent {self.talent_id}: {len(self.skill_ids)} skill ids but {len(self.skill_weights)} weights")

    def text(self) -> str:
        return f"{self.name}. {self.when_to_apply} {self.strategy}".strip()

    def content(self) -> dict:
        d = asdict(self)
        d.pop("library_version")
        d.pop("vector")
        d["skill_weights"] = [round(float(w), 6) for w in d["skill_weights"]]
        return d

    def weights(self) -> dict[str, float]:
        return dict(zip(self.skill_ids, (float(w) for w in self.skill_weights)))


@dataclass
class LabelRecord:
    env: str
    task_type: str
    talent_id: str
    kind: str = "traj"
    "traj: one trajectory's routing label; oracle: the best talent of a task type; matrix: one strategy x task-type cell."
    traj_uid: str = ""
    task_id: str = ""
    share: float = 1.0
    "oracle: share of the task type's successful trajectories in that talent (strategy libraries: the best strategy's success rate); matrix: the cell's success rate; traj: 1.0."
    library_version: int = 0
    strategy: str = ""
    "The strategy expert behind the label (strategy libraries, ``strategy_labels.py``); empty otherwise."
    n: int = 0
    "matrix: episodes in the cell."
    steps: float = 0.0
    "matrix: mean steps of the cell's successful episodes."

    def content(self) -> dict:
        d = asdict(self)
        d.pop("library_version")
        return d


def skills_schema(dim: int) -> pa.Schema:
    return pa.schema(
        [
            ("skill_id", pa.string()),
            ("env", pa.string()),
            ("kind", pa.string()),
            ("task_types", pa.list_(pa.string())),
            ("title", pa.string()),
            ("principle", pa.string()),
            ("when_to_apply", pa.string()),
            ("example", pa.string()),
            ("source_traj_ids", pa.list_(pa.string())),
            ("n_used", pa.int64()),
            ("success_with", pa.float64()),
            ("success_without", pa.float64()),
            ("utility", pa.float64()),
            ("library_version", pa.int64()),
            ("vector", pa.list_(pa.float32(), dim)),
        ],
        metadata={"talentrl.schema": "skills/1"},
    )


def talents_schema(dim: int) -> pa.Schema:
    return pa.schema(
        [
            ("talent_id", pa.string()),
            ("env", pa.string()),
            ("name", pa.string()),
            ("strategy", pa.string()),
            ("when_to_apply", pa.string()),
            ("skill_ids", pa.list_(pa.string())),
            ("skill_weights", pa.list_(pa.float32())),
            ("library_version", pa.int64()),
            ("vector", pa.list_(pa.float32(), dim)),
        ],
        metadata={"talentrl.schema": "talents/1"},
    )


LABELS_SCHEMA = pa.schema(
    [
        ("env", pa.string()),
        ("task_type", pa.string()),
        ("talent_id", pa.string()),
        ("kind", pa.string()),
        ("traj_uid", pa.string()),
        ("task_id", pa.string()),
        ("share", pa.float64()),
        ("library_version", pa.int64()),
        ("strategy", pa.string()),
        ("n", pa.int64()),
        ("steps", pa.float64()),
    ],
    metadata={"talentrl.schema": "labels/2"},
)

VERSIONS_SCHEMA = pa.schema(
    [
        ("library_version", pa.int64()),
        ("skills_table_version", pa.int64()),
        ("talents_table_version", pa.int64()),
        ("labels_table_version", pa.int64()),
        ("created_utc", pa.string()),
        ("note", pa.string()),
        ("embedder", pa.string()),
        ("dim", pa.int64()),
    ],
    metadata={"talentrl.schema": "versions/1"},
)


def _rows_to_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)


def skills_to_arrow(skills: list[SkillRecord], dim: int) -> pa.Table:
    return _rows_to_table([asdict(s) for s in skills], skills_schema(dim))


def talents_to_arrow(talents: list[TalentRecord], dim: int) -> pa.Table:
    return _rows_to_table([asdict(t) for t in talents], talents_schema(dim))


def labels_to_arrow(labels: list[LabelRecord]) -> pa.Table:
    return _rows_to_table([asdict(l) for l in labels], LABELS_SCHEMA)


def _from_rows(cls, table: Optional[pa.Table]) -> list:
    if table is None or table.num_rows == 0:
        return []
    names = {f.name for f in fields(cls)}
    return [cls(**{k: v for k, v in r.items() if k in names}) for r in table.to_pylist()]


def skills_from_arrow(table: Optional[pa.Table]) -> list[SkillRecord]:
    return _from_rows(SkillRecord, table)


def talents_from_arrow(table: Optional[pa.Table]) -> list[TalentRecord]:
    return _from_rows(TalentRecord, table)


def labels_from_arrow(table: Optional[pa.Table]) -> list[LabelRecord]:
    return _from_rows(LabelRecord, table)

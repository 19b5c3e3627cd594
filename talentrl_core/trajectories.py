"""Trajectory records and their Parquet schema (one row per episode, steps nested).

Layout on disk: ``<root>/env=<env>/<run_id>.parquet`` (hive-style partition by environment), each file
written atomically. ``read_trajectories`` validates the schema and names the file on any problem.

Columns (``SCHEMA``):
    run_id, env, split, task_id, task_type, task_json   — which task (task_json rebuilds the Task)
    goal, initial_observation                             — the instruction and the first observation
    group_uid, traj_uid                                   — rollout group and this trajectory
    arm, talent_id                                        — routing arm / chosen talent (null until routing)
    retrieved_skill_ids                                   — skills in the execution context
    steps: list<struct{prompt, completion, action, observation, reward, valid,
                       prompt_tokens, completion_tokens, admissible,
                       completion_ids, logprobs}>
        step i: ``prompt`` shows the observation *before* the action (the initial observation for i=0,
        else step i-1's ``observation``); ``observation`` is what the env answered.
    final_reward, success, error                          — outcome; error set when the env crashed
    n_steps, n_invalid, library_version, policy, checkpoint
    strategy                                              — the strategy expert that produced it (null otherwise)

Files written before the ``strategy`` column existed (tag ``trajectories/1``) read with ``strategy`` null.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from .io import atomic_path

STEP_TYPE = pa.struct(
    [
        ("prompt", pa.string()),
        ("completion", pa.string()),
        ("action", pa.string()),
        ("observation", pa.string()),
        ("reward", pa.float32()),
        ("valid", pa.bool_()),
        ("prompt_tokens", pa.int32()),
        ("completion_tokens", pa.int32()),
        ("admissible", pa.list_(pa.string())),
        ("completion_ids", pa.list_(pa.int32())),
        ("logprobs", pa.list_(pa.float32())),
    ]
)

SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("env", pa.string()),
        ("split", pa.string()),
        ("task_id", pa.string()),
        ("task_type", pa.string()),
        ("task_json", pa.string()),
        ("goal", pa.string()),
        ("initial_observation", pa.string()),
        ("group_uid", pa.string()),
        ("traj_uid", pa.string()),
        ("arm", pa.int32()),
        ("talent_id", pa.string()),
        ("retrieved_skill_ids", pa.list_(pa.string())),
        ("steps", pa.list_(STEP_TYPE)),
        ("final_reward", pa.float32()),
        ("success", pa.bool_()),
        ("error", pa.string()),
        ("n_steps", pa.int32()),
        ("n_invalid", pa.int32()),
        ("library_version", pa.int64()),
        ("policy", pa.string()),
        ("checkpoint", pa.string()),
        ("strategy", pa.string()),
    ],
    metadata={"talentrl.schema": "trajectories/2"},
)
_OLDER_TAGS = {b"trajectories/1": ["strategy"]}
"Older schema tags this reader accepts → the columns they lack (read as nulls)."


ROUTING_MARK = "talent:"
"""A routing step's ``action`` is ``talent:<talent id>`` (the rollout loop's record of the router's choice); the one
place this marker is spelled."""


def routing_action(talent_id: Optional[str]) -> str:
    """The ``action`` a routing step records.

    >>> routing_action("T-1a2b"), is_routing_action("talent:T-1a2b"), is_routing_action("go east")
    ('talent:T-1a2b', True, False)
    """
    return f"{ROUTING_MARK}{talent_id}"


def command_key(action: Optional[str]) -> str:
    """A command up to case and spacing (None: ""), for comparing two commands.

    >>> command_key("Go to  Desk 1"), command_key(None)
    ('go to desk 1', '')
    """
    return " ".join(str(action or "").lower().split())


def is_routing_action(action: Optional[str]) -> bool:
    return (action or "").startswith(ROUTING_MARK)


@dataclass
class Step:
    prompt: str
    completion: str
    action: str
    observation: str
    reward: float
    valid: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    admissible: Optional[list[str]] = None
    "Admissible commands shown with this step's observation (None for open action spaces)."
    completion_ids: Optional[list[int]] = None
    "Generated token ids (LLM policies), eos included: RL scores exactly what was sampled."
    logprobs: Optional[list[float]] = None
    "Per-token log-probs recorded at rollout (under the decoding mask), for the PPO ratio."

    @property
    def is_routing(self) -> bool:
        "The router's choice, not an action in the environment."
        return is_routing_action(self.action)


@dataclass
class Trajectory:
    run_id: str
    env: str
    split: str
    task_id: str
    task_type: str
    task_json: str
    goal: str = ""
    initial_observation: str = ""
    group_uid: str = ""
    traj_uid: str = field(default_factory=lambda: uuid.uuid4().hex)
    arm: Optional[int] = None
    talent_id: Optional[str] = None
    retrieved_skill_ids: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    final_reward: float = 0.0
    success: bool = False
    error: Optional[str] = None
    library_version: Optional[int] = None
    policy: str = ""
    checkpoint: str = ""
    strategy: Optional[str] = None
    "The strategy expert that produced this trajectory (``envs.strategies``); None for other policies."

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    def env_steps(self) -> list[Step]:
        "The steps taken in the environment (the routing step left out)."
        return [s for s in self.steps if not s.is_routing]

    @property
    def n_invalid(self) -> int:
        return sum(not s.valid for s in self.steps)

    def n_repeated(self) -> int:
        """Environment steps whose action was already taken earlier in the episode (up to case and spacing): in
        ALFWorld a walk back to a receptacle already visited, the loop an imitating student falls into.

        >>> t = Trajectory("r", "alfworld", "valid", "t", "look", "{}", steps=[Step("", "", a, "", 0.0, True) for a in
        ...                ("go to desk 1", "go to bed 1", "Go to desk 1", "take cd 1 from desk 1")])
        >>> t.n_repeated()
        1
        """
        seen, repeated = set(), 0
        for s in self.env_steps():
            key = command_key(s.action)
            repeated += key in seen
            seen.add(key)
        return repeated

    def to_row(self) -> dict:
        d = asdict(self)
        d["n_steps"] = self.n_steps
        d["n_invalid"] = self.n_invalid
        return d

    @staticmethod
    def from_row(d: dict) -> "Trajectory":
        d = dict(d)
        d.pop("n_steps", None)
        d.pop("n_invalid", None)
        d["steps"] = [Step(**s) for s in d["steps"]]
        return Trajectory(**d)


class TrajectoryFileError(ValueError):
    """A trajectory file is corrupt or is not a TalentRL trajectory file; the message names it."""


def write_trajectories(trajs: Iterable[Trajectory], root: str | Path, run_id: str) -> list[Path]:
    """Write one Parquet file per env partition; returns the paths. Atomic per file."""
    by_env: dict[str, list[dict]] = {}
    for t in trajs:
        by_env.setdefault(t.env, []).append(t.to_row())
    paths = []
    for env, rows in sorted(by_env.items()):
        path = Path(root) / f"env={env}" / f"{run_id}.parquet"
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp)
        paths.append(path)
    return paths


def _read_file(path: Path) -> pa.Table:
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise TrajectoryFileError(f"{path}: cannot be read as Parquet ({type(e).__name__}: {e})") from e
    meta = table.schema.metadata or {}
    tag = meta.get(b"talentrl.schema")
    if tag in _OLDER_TAGS:
        for name in _OLDER_TAGS[tag]:
            if name not in table.schema.names:
                table = table.append_column(SCHEMA.field(name), pa.nulls(table.num_rows, SCHEMA.field(name).type))
    elif tag != b"trajectories/2":
        raise TrajectoryFileError(
            f"{path}: not a TalentRL trajectory file (missing schema tag 'trajectories/2'; "
            f"columns {table.schema.names[:6]}...)"
        )
    missing = [n for n in SCHEMA.names if n not in table.schema.names]
    if missing:
        raise TrajectoryFileError(f"{path}: missing columns {missing}")
    return table.select(SCHEMA.names)


def trajectory_files(root: str | Path, env: Optional[str] = None) -> list[Path]:
    root = Path(root)
    pattern = f"env={env}/*.parquet" if env else "env=*/*.parquet"
    return sorted(root.glob(pattern))


def read_table(root_or_file: str | Path, env: Optional[str] = None) -> pa.Table:
    p = Path(root_or_file)
    files = [p] if p.is_file() else trajectory_files(p, env)
    if not files:
        return SCHEMA.empty_table()
    return pa.concat_tables([_read_file(f) for f in files])


def read_trajectories(root_or_file: str | Path, env: Optional[str] = None) -> list[Trajectory]:
    return [Trajectory.from_row(r) for r in read_table(root_or_file, env).to_pylist()]

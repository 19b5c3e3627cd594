"""The batched rollout loop: many environments advanced together, the model called only for active ones.

An episode is ``EpisodeSpec`` (task, how its talent is chosen, arm, group, seed). For each episode:

1. **route** — ``routing``: ``none`` (no talent), ``policy`` (the policy answers the routing prompt with
   ``<talent>ID</talent>``; unknown ids fall back to the nearest talent by embedding and count a format
   error), ``fixed``/``oracle`` (given id), ``random`` (seeded choice);
2. **retrieve** — skills for the goal under the talent (``Knowledge.context``; the same function the SFT
   data builder calls, so training context equals inference context);
3. **execute** — turns of (prompt → completion → parsed action → env step) until done or ``max_steps``.

A crash or a step slower than ``step_timeout_s`` ends that episode as failed with the error recorded; the
rest of the batch goes on. An unparseable completion is an invalid action (observation says so, penalty).
Who answers the prompts (expert, random, the model) is a ``policies.Policy``.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import random
import uuid
from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Protocol, Sequence

from tqdm.auto import tqdm

from .env_pool import prefetch_resets, prefetch_steps, run_pooled
from .envs.base import INVALID_ACTION_OBS, Env, Task
from .generation import GenResult
from .policies import Policy, PolicyInput, action_completions
from .prompts import (
    RoutingCue,
    SkillView,
    TalentView,
    exec_context,
    execution_messages,
    menu_choice,
    parse_for_env,
    parse_talent,
    routing_completions,
    routing_cue,
    routing_prompt,
)
from .threads import follow_free_cpus
from .trajectories import Step, Trajectory, routing_action


# ----------------------------------------------------------------------------------------------------------
# What the agent knows: talents and skills (the library adapter implements this)


@dataclass
class SkillContext:
    talent: Optional[TalentView]
    skills: list[SkillView]
    skill_ids: list[str]
    scores: list[float] = field(default_factory=list)


class Knowledge(Protocol):
    version: Optional[int]

    def menu(self, env: str) -> list[TalentView]: ...

    def context(self, env: str, goal: str, task_type: str, talent_id: Optional[str], use_skills: bool = True) -> SkillContext: ...

    def nearest_talent(self, env: str, text: str) -> Optional[str]: ...

    def oracle_talent(self, env: str, task_type: str, task_id: str = "") -> Optional[str]: ...

    def label_for(self, traj: Trajectory) -> Optional[str]: ...


class NoKnowledge:
    """Zero-shot: no talents, no skills."""

    version = None

    def menu(self, env):
        return []

    def context(self, env, goal, task_type, talent_id, use_skills=True):
        return SkillContext(None, [], [])

    def nearest_talent(self, env, text):
        return None

    def oracle_talent(self, env, task_type, task_id=""):
        return None

    def label_for(self, traj):
        return None


# ----------------------------------------------------------------------------------------------------------
# The loop


@dataclass
class EpisodeSpec:
    task: Task
    routing: str = "none"
    "none | policy | fixed | oracle | random"
    talent_id: Optional[str] = None
    arm: Optional[int] = None
    group_uid: str = ""
    seed: int = 0
    use_skills: bool = True


@dataclass
class RolloutSettings:
    max_steps: int = 30
    history: int = 2
    obs_chars: int = 400
    step_timeout_s: float = 60.0
    invalid_penalty: float = 0.0
    routing_obs_chars: int = 0
    "Characters of the first observation the router sees (``env.routing_obs_chars``)."
    routing_cue: Optional[RoutingCue] = None
    "The cue the router restates before its talent (``env.routing_cue``; None: the talent only)."
    memory: bool | str = False
    "The family's memory line in execution prompts (``EnvConfig.memory_mode``: empty, page, goal or goal_command)."
    env_workers: int = 0
    "Envs in this many worker processes, stepped at once (``env.workers``, ``env_pool``); 0: in this process."
    run_id: str = ""
    split: str = ""
    checkpoint: str = ""

    @classmethod
    def of(cls, env_cfg, **kw) -> "RolloutSettings":
        """The settings an ``EnvConfig`` gives (step budget, prompt view, timeouts), plus ``kw`` (run_id, split, …)."""
        return cls(max_steps=env_cfg.max_steps, history=env_cfg.history, obs_chars=env_cfg.obs_chars,
                   step_timeout_s=env_cfg.step_timeout_s, invalid_penalty=env_cfg.invalid_penalty,
                   routing_obs_chars=env_cfg.routing_obs_chars, env_workers=env_cfg.workers, memory=env_cfg.memory_mode,
                   routing_cue=routing_cue(env_cfg.routing_cue, env_cfg.routing_cue_values), **kw)


class _Slot:
    def __init__(self, env: Env):
        self.env = env
        self.spec: Optional[EpisodeSpec] = None
        self.traj: Optional[Trajectory] = None
        self.ctx: Optional[SkillContext] = None
        self.obs = ""
        self.history: list[tuple[str, str]] = []
        self.admissible: Optional[list[str]] = None
        self.routing_msgs: Optional[list[dict]] = None


def _call(fn: Callable, timeout: float):
    """Run fn with a wall-clock limit. On timeout the worker thread is abandoned (and its env discarded)."""
    ex = cf.ThreadPoolExecutor(max_workers=1)
    fut = ex.submit(fn)
    try:
        return fut.result(timeout=timeout)
    except cf.TimeoutError as e:
        raise TimeoutError(f"environment call exceeded {timeout:.0f}s") from e
    finally:
        ex.shutdown(wait=False)


class _EpisodeRunner:
    """The state of one ``run_episodes`` call: a pool of env slots, the queue of specs, finished trajectories."""

    def __init__(self, make_env, specs, policy, settings, knowledge, batch_size, progress, on_routing, on_episode):
        self.make_env, self.policy, self.settings = make_env, policy, settings
        self.knowledge = knowledge or NoKnowledge()
        self.batch_size, self.on_routing, self.on_episode = batch_size, on_routing, on_episode
        self.run_key = uuid.uuid4().hex  # KV-cache keys of this call's episodes (see PolicyInput.cache_key)
        self.results: list[Optional[Trajectory]] = [None] * len(specs)
        self.queue = list(enumerate(specs))[::-1]
        self.slots: list[_Slot] = []
        self.index_of: dict[int, int] = {}
        self.bar = tqdm(total=len(specs), desc=f"episodes[{policy.name}]", disable=not progress)

    # -- episode lifecycle
    def finish(self, slot: _Slot, error: Optional[str] = None) -> None:
        t = slot.traj
        if error:
            t.error = error
            t.success = False
        t.final_reward = float(sum(s.reward for s in t.steps))  # every family: env rewards + env.invalid_penalty
        self.results[self.index_of[id(slot)]] = t
        slot.spec = None
        self.bar.update(1)
        if self.on_episode is not None:
            self.on_episode()

    def fail(self, slot: _Slot, where: str, e: Exception) -> None:
        """A broken env fails its episode, never the run: the slot gets a fresh env."""
        slot.env = self.make_env()
        self.finish(slot, f"{where}: {type(e).__name__}: {e}")

    def start(self, slot: _Slot, idx: int, spec: EpisodeSpec) -> None:
        task, kn, settings = spec.task, self.knowledge, self.settings
        slot.spec, slot.history, slot.ctx = spec, [], None
        self.index_of[id(slot)] = idx
        slot.traj = Trajectory(
            run_id=settings.run_id, env=task.env, split=task.split or settings.split, task_id=task.task_id,
            task_type=task.task_type, task_json=task.to_json(), group_uid=spec.group_uid or uuid.uuid4().hex,
            arm=spec.arm, library_version=kn.version, policy=self.policy.name, checkpoint=settings.checkpoint,
            strategy=getattr(self.policy, "strategy", None),
        )
        try:
            slot.obs = _call(lambda: slot.env.reset(task), settings.step_timeout_s)
            slot.traj.goal = slot.env.goal()
            slot.traj.initial_observation = slot.obs
            slot.admissible = slot.env.admissible_actions()
        except Exception as e:  # noqa: BLE001
            self.fail(slot, "reset", e)
            return
        talent = spec.talent_id
        if spec.routing == "oracle":
            talent = kn.oracle_talent(task.env, task.task_type, task.task_id)
        elif spec.routing == "random":
            menu = kn.menu(task.env)
            talent = random.Random(spec.seed).choice(menu).talent_id if menu else None
        elif spec.routing == "policy":
            menu = kn.menu(task.env)
            if menu:
                slot.routing_msgs = routing_prompt(task.env, slot.traj.goal, slot.obs, menu, settings.routing_obs_chars)
                return  # resolved in the batched routing call
        self.set_talent(slot, talent)

    def set_talent(self, slot: _Slot, talent: Optional[str]) -> None:
        slot.traj.talent_id = talent
        slot.ctx = self.knowledge.context(slot.traj.env, slot.traj.goal, slot.traj.task_type, talent, slot.spec.use_skills)
        slot.traj.retrieved_skill_ids = list(slot.ctx.skill_ids)

    def refill(self) -> None:
        self.slots += prefetch_resets(self.slots, self.queue, self.batch_size, self.make_env, _Slot)  # pool: resets at once
        for slot in self.slots:
            while slot.spec is None and self.queue:
                self.start(slot, *self.queue.pop())
        while len(self.slots) < self.batch_size and self.queue:
            slot = _Slot(self.make_env())
            self.slots.append(slot)
            self.start(slot, *self.queue.pop())
            while slot.spec is None and self.queue:
                self.start(slot, *self.queue.pop())

    # -- one batched turn
    def route(self) -> None:
        """The routing call for episodes that just started under ``routing=policy``."""
        routing = [s for s in self.slots if s.spec is not None and s.routing_msgs is not None]
        if not routing:
            return
        kn = self.knowledge
        items = [PolicyInput("route", s.routing_msgs, routing_completions([t.shown for t in kn.menu(s.traj.env)],
                                                                          self.settings.routing_cue),
                             s.spec.seed, s.env, s.traj.env) for s in routing]
        for s, it, out in zip(routing, items, self.policy.complete(items)):
            menu = kn.menu(s.traj.env)
            chosen = menu_choice(menu, parse_talent(out.text))
            routing_valid = chosen is not None
            if not routing_valid:  # format error: counted via valid=False, nearest talent used
                chosen = kn.nearest_talent(s.traj.env, out.text) or (menu[0].talent_id if menu else None)
            s.traj.steps.append(
                Step(prompt=json.dumps(s.routing_msgs), completion=out.text, action=routing_action(chosen),
                     observation="", reward=0.0, valid=routing_valid, prompt_tokens=out.prompt_tokens,
                     completion_tokens=len(out.token_ids), completion_ids=list(out.token_ids) or None,
                     logprobs=list(out.logprobs) or None)
            )
            if self.on_routing:
                self.on_routing(s.traj, it, out)
            s.routing_msgs = None
            self.set_talent(s, chosen)

    def exec_input(self, s: _Slot) -> PolicyInput:
        settings = self.settings
        ctx = exec_context(s.traj.env, s.traj.goal, s.obs, s.ctx.talent, s.ctx.skills, s.history, settings.history,
                           s.admissible, settings.obs_chars, settings.memory)
        return PolicyInput("exec", execution_messages(ctx), action_completions(s.traj.env, s.admissible),
                           None if s.spec.seed is None else s.spec.seed * 1000 + len(s.traj.env_steps()), s.env, s.traj.env,
                           cache_key=(self.run_key, id(s)))

    def execute(self) -> None:
        """One execution turn for every active episode."""
        active = [s for s in self.slots if s.spec is not None]
        items = [self.exec_input(s) for s in active]
        outs = self.policy.complete(items)
        prefetch_steps(active, [parse_for_env(s.traj.env, o.text) for s, o in zip(active, outs)])  # pool: steps at once
        for s, it, out in zip(active, items, outs):
            self.apply(s, it, out)

    def apply(self, s: _Slot, it: PolicyInput, out: GenResult) -> None:
        """Parse ``out``, step the env, record the step; end the episode when it is done or out of steps."""
        settings = self.settings
        action = parse_for_env(s.traj.env, out.text)
        step = Step(prompt=json.dumps(it.messages), completion=out.text, action=action or "", observation="",
                    reward=0.0, valid=action is not None, prompt_tokens=out.prompt_tokens,
                    completion_tokens=len(out.token_ids), admissible=s.admissible,
                    completion_ids=list(out.token_ids) or None, logprobs=list(out.logprobs) or None)
        s.traj.steps.append(step)
        done = False
        if action is None:
            step.observation = INVALID_ACTION_OBS
            step.reward = settings.invalid_penalty
        else:
            try:
                r = _call(lambda: s.env.step(action), settings.step_timeout_s)
            except Exception as e:  # noqa: BLE001
                return self.fail(s, "step", e)
            step.observation = r.observation
            step.valid = bool(r.info.get("valid", True))
            step.reward = float(r.reward) + (0.0 if step.valid else settings.invalid_penalty)
            done = r.done
            if r.won:
                s.traj.success = True
            try:
                s.admissible = s.env.admissible_actions()
            except Exception as e:  # noqa: BLE001
                return self.fail(s, "admissible", e)
        s.history.append((s.obs, action or out.text))
        s.obs = step.observation
        if done or len(s.traj.env_steps()) >= settings.max_steps:
            self.finish(s)

    def run(self) -> list[Trajectory]:
        try:
            self.refill()
            while any(s.spec is not None for s in self.slots):
                follow_free_cpus()
                self.route()
                self.execute()
                self.refill()
        finally:
            self.bar.close()
            for s in self.slots:
                try:
                    s.env.close()
                except Exception:  # noqa: BLE001
                    pass
        return [t for t in self.results if t is not None]


def run_episodes(
    make_env: Callable[[], Env],
    specs: Sequence[EpisodeSpec],
    policy: Policy,
    settings: RolloutSettings,
    knowledge: Optional[Knowledge] = None,
    batch_size: int = 16,
    progress: bool = True,
    on_routing: Optional[Callable[[Trajectory, PolicyInput, GenResult], None]] = None,
    on_episode: Optional[Callable[[], None]] = None,
) -> list[Trajectory]:
    """Play every spec; returns trajectories in the order of ``specs`` (``on_episode()`` after each one ends)."""
    runner = _EpisodeRunner(make_env, specs, policy, settings, knowledge, batch_size, progress, on_routing, on_episode)
    return run_pooled(runner, settings.env_workers, settings.step_timeout_s)  # env.workers > 0: envs in processes


_EPISODES_DONE = None  # multiprocessing counter of run_episodes_parallel's workers


def _count_episode() -> None:
    if _EPISODES_DONE is not None:
        with _EPISODES_DONE.get_lock():
            _EPISODES_DONE.value += 1


def run_episodes_parallel(make_env: Callable[[], Env], specs: Sequence[EpisodeSpec], policy_factory: Callable[[int], Policy],
                          settings: RolloutSettings, workers: int = 1, batch_size: int = 16,
                          knowledge: Optional[Knowledge] = None, progress: bool = True) -> list[Trajectory]:
    """Model-free policies (expert, random) over worker processes: env resets are CPU-bound Python."""
    if workers <= 1 or len(specs) < 2:
        return run_episodes(make_env, specs, policy_factory(0), settings, knowledge, batch_size, progress)
    import multiprocessing as mp

    settings = replace(settings, env_workers=0)  # already one process per worker: no env pool inside each
    global _EPISODES_DONE
    chunks = [list(specs[i::workers]) for i in range(workers)]
    ctx = mp.get_context("fork")
    _EPISODES_DONE = ctx.Value("i", 0)  # inherited by the forked workers: one bar counts every worker's episodes
    bar = tqdm(total=len(specs), desc=f"episodes[{policy_factory(0).name} x{workers}]", disable=not progress)
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
        futs = [ex.submit(run_episodes, make_env, chunk, policy_factory(i), settings, knowledge, batch_size, False,
                          None, _count_episode) for i, chunk in enumerate(chunks)]
        while cf.wait(futs, timeout=0.5).not_done:
            bar.update(_EPISODES_DONE.value - bar.n)
        parts = [f.result() for f in futs]
    bar.update(_EPISODES_DONE.value - bar.n)
    bar.close()
    by_uid = {}
    for t in (t for part in parts for t in part):
        by_uid.setdefault(t.task_id, []).append(t)
    return [by_uid[sp.task.task_id].pop(0) for sp in specs]  # restore spec order

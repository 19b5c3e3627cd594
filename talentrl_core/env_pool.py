"""Environments in worker processes (``env.workers > 0``): ALFWorld is pure Python and not thread-safe, so
batching episodes inside one process steps them one after another. ``EnvPool`` starts ``workers`` processes;
each builds its environments with the family's factory (``family.make``, pickled to the worker) and serves
their calls over a pipe. ``EnvPool.make`` hands out ``ProcessEnv`` proxies (round-robin over the workers) that
implement the ``Env`` protocol, so the rollout loop is unchanged; it only *announces* the resets and steps of a
turn first (``prefetch_resets``, ``prefetch_steps``) so every worker runs its share at once, then collects the
results in its usual order: the episodes are the ones the in-process loop plays.

Isolation: a worker that dies (crash, ``os._exit``, SIGKILL) fails the episodes of the envs it held
(``WorkerDied``; the loop records the error and asks for a fresh env) and is started again on the next
``make``; a call slower than ``timeout_s`` kills its worker (``TimeoutError``) the same way. With no more
slots than workers, each worker holds one env, so a crash ends exactly one episode.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import pickle
import threading
from typing import Any, Callable, Optional

from .envs.base import StepResult, Task


class WorkerDied(RuntimeError):
    """The worker process holding an env exited (crash or kill) or was killed after a timeout."""


def _portable(e: BaseException) -> BaseException:
    """``e`` if it crosses a pipe intact, else a RuntimeError carrying its text."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(e).__name__}: {e}")


def _attempt(fn: Callable) -> tuple[bool, Any]:
    try:
        return True, fn()
    except Exception as e:  # noqa: BLE001
        return False, _portable(e)


def _serve(conn, factory: Callable) -> None:
    """Worker loop: ``(seq, env_id, method, args)`` in, ``(seq, ok, value)`` out, in order."""
    envs: dict[int, Any] = {}
    conn.send((-1, True, None))  # started: the parent's call timeouts count from here
    while True:
        try:
            seq, eid, method, args = conn.recv()
        except (EOFError, OSError):
            break
        try:
            if method == "_quit":
                break
            if method == "_make":
                envs[eid], value = factory(), None
            elif method == "_drop":  # fire and forget: no reply
                env = envs.pop(eid, None)
                if env is not None:
                    _attempt(env.close)
                continue
            else:
                env = envs[eid]
                value = getattr(env, method)(*args)
                if method == "reset":  # the loop asks for these next: one round trip, not three
                    value = (value, _attempt(env.goal), _attempt(env.admissible_actions))
                elif method == "step":
                    value = (value, _attempt(env.admissible_actions))
            reply = (seq, True, value)
        except Exception as e:  # noqa: BLE001 - the env's error goes to the caller, the worker lives on
            reply = (seq, False, _portable(e))
        conn.send(reply)
    for env in envs.values():
        try:
            env.close()
        except Exception:  # noqa: BLE001
            pass


class _Worker:
    def __init__(self, ctx, factory: Callable, index: int):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, factory), name=f"env-worker-{index}", daemon=True)
        self.proc.start()
        child.close()
        self.lock = threading.Lock()  # one reader at a time (an abandoned timed-out call may still be reading)
        self.send_lock = threading.Lock()
        self.seq = itertools.count()
        self.replies: dict[int, tuple[bool, Any]] = {}
        self.dead: Optional[str] = None
        self.started = False

    STARTUP_S = 300.0
    "A fresh worker imports the family's modules before it answers (seconds under spawn, more on a loaded machine)."

    def send(self, eid: int, method: str, *args) -> int:
        if self.dead:
            raise WorkerDied(self.dead)
        try:
            with self.send_lock:
                seq = next(self.seq)
                self.conn.send((seq, eid, method, args))
        except (OSError, ValueError) as e:
            self.kill(f"env worker died ({type(e).__name__})")
            raise WorkerDied(self.dead) from e
        return seq

    def receive(self, seq: int, timeout: float) -> Any:
        with self.lock:
            while seq not in self.replies:
                if self.dead:
                    raise WorkerDied(self.dead)
                try:
                    ready = self.conn.poll(timeout if self.started else self.STARTUP_S)
                    got, ok, value = self.conn.recv() if ready else (None, None, None)
                    if got == -1:
                        self.started = True
                        continue
                except (EOFError, OSError) as e:
                    self.kill("env worker died")
                    raise WorkerDied(f"{self.dead} (exit code {self.proc.exitcode})") from e
                if not ready:  # TimeoutError is an OSError: raised outside the try above
                    self.kill(f"env worker killed: no answer in {timeout:.0f}s")
                    raise TimeoutError(f"environment call exceeded {timeout:.0f}s (worker killed)")
                self.replies[got] = (ok, value)
            ok, value = self.replies.pop(seq)
        if not ok:
            raise value
        return value

    def kill(self, why: str) -> None:
        self.dead = self.dead or why
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()


class ProcessEnv:
    """One env living in a worker process (the ``Env`` protocol, plus ``prefetch_reset``/``prefetch_step``)."""

    def __init__(self, worker: _Worker, eid: int, name: str, timeout: float):
        self.worker, self.eid, self.name, self.timeout = worker, eid, name, timeout
        self._pending: Optional[tuple[str, Any, int]] = None  # (method, argument, seq) announced, not collected
        self._goal: Optional[tuple[bool, Any]] = None
        self._admissible: Optional[tuple[bool, Any]] = None
        self._made: Optional[int] = worker.send(eid, "_make")  # collected (its error raised) on the first receive

    def _receive(self, seq: int) -> Any:
        if self._made is not None:
            made, self._made = self._made, None
            self.worker.receive(made, self.timeout)
        return self.worker.receive(seq, self.timeout)

    def _rpc(self, method: str, *args) -> Any:
        self._collect_pending()
        return self._receive(self.worker.send(self.eid, method, *args))

    def _collect_pending(self) -> None:
        if self._pending is not None:  # an announced call nobody collected: drain its reply
            _, _, seq = self._pending
            self._pending = None
            try:
                self._receive(seq)
            except (WorkerDied, TimeoutError):
                raise
            except Exception:  # noqa: BLE001
                pass

    def _announce(self, method: str, arg: Any) -> None:
        self._collect_pending()
        try:
            self._pending = (method, arg, self.worker.send(self.eid, method, arg))
        except WorkerDied:
            pass  # the real call raises it

    def _take(self, method: str, arg: Any) -> Any:
        p = self._pending
        if p is not None and p[0] == method and p[1] == arg:
            self._pending = None
            return self._receive(p[2])
        return self._rpc(method, arg)

    def prefetch_reset(self, task: Task) -> None:
        self._announce("reset", task)

    def prefetch_step(self, action: str) -> None:
        self._announce("step", action)

    def reset(self, task: Task) -> str:
        self._goal = self._admissible = None
        obs, self._goal, self._admissible = self._take("reset", task)
        return obs

    def step(self, action: str) -> StepResult:
        self._admissible = None
        result, self._admissible = self._take("step", action)
        return result

    @staticmethod
    def _cached(got: Optional[tuple[bool, Any]]) -> Any:
        ok, value = got
        if not ok:
            raise value
        return value

    def goal(self) -> str:
        return self._cached(self._goal) if self._goal is not None else self._rpc("goal")

    def admissible_actions(self) -> Optional[list[str]]:
        return self._cached(self._admissible) if self._admissible is not None else self._rpc("admissible_actions")

    def expert_action(self) -> Optional[str]:
        return self._rpc("expert_action")

    def strategy_action(self, name: str) -> Optional[str]:
        return self._rpc("strategy_action", name)

    def call(self, method: str, *args) -> Any:
        """Any other method of the env (``walkthrough``, ``replan``...), or ``call("__getattribute__", name)``."""
        return self._rpc(method, *args)

    def close(self) -> None:
        if not self.worker.dead and not getattr(self, "_closed", False):
            self._closed = True
            try:
                self._pending = None
                self.worker.send(self.eid, "_drop")
            except (WorkerDied, OSError):
                pass

    def __del__(self) -> None:  # a slot whose episode failed drops its env without closing it
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


class EnvPool:
    """``workers`` env processes; ``make()`` is the rollout loop's ``make_env``. A context manager (stops them)."""

    prefetch = True
    "Marks ``make`` for the rollout loop: announce resets and steps before collecting them."

    def __init__(self, factory: Callable, workers: int, timeout_s: float = 60.0, start_method: Optional[str] = None):
        if workers < 1:
            raise ValueError(f"EnvPool: workers must be >= 1, got {workers}")
        if start_method is None:  # spawn needs a picklable factory (family.make is); fork otherwise
            try:
                pickle.dumps(factory)
                start_method = "spawn"
            except Exception:  # noqa: BLE001
                start_method = "fork"
        self.ctx = mp.get_context(start_method)
        # a hung call is killed here just before the rollout loop's own timeout abandons it (``rollout._call``),
        # so the worker is marked dead before the loop asks for a fresh env
        self.factory, self.timeout = factory, timeout_s - min(1.0, 0.1 * timeout_s)
        self.workers: list[_Worker] = [_Worker(self.ctx, factory, i) for i in range(workers)]
        self.eids = itertools.count()
        self.turn = itertools.count()
        self.name = getattr(factory(), "name", "") if start_method == "fork" else ""
        self.restarts = 0

    def make(self) -> ProcessEnv:
        i = next(self.turn) % len(self.workers)
        if self.workers[i].dead:  # a dead worker is replaced on the next request for an env
            self.workers[i] = _Worker(self.ctx, self.factory, i)
            self.restarts += 1
        env = ProcessEnv(self.workers[i], next(self.eids), self.name, self.timeout)
        if not env.name:
            env.name = self.name = env.call("__getattribute__", "name")
        return env

    make.prefetch = True  # type: ignore[attr-defined]

    def warm(self, task: Optional[Task] = None) -> "EnvPool":
        """Wait until every worker has started and built an env (and reset it on ``task``: the family's lazy imports),
        to keep start-up out of a timed run; reuse the pool by passing ``pool.make`` as ``make_env``."""
        envs = [self.make() for _ in self.workers]
        for env in envs:
            env.prefetch_reset(task) if task is not None else None
        for env in envs:
            env.reset(task) if task is not None else env.call("__getattribute__", "name")
            env.close()
        return self

    def close(self) -> None:
        for w in self.workers:
            if not w.dead:
                try:
                    w.send(-1, "_quit")  # the worker closes its envs and exits
                except WorkerDied:
                    pass
                w.proc.join(10)
                w.kill("pool closed")

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prefetch_resets(slots: list, queue: list, batch_size: int, make_env: Callable, new_slot: Callable) -> list:
    """Before ``refill``: add the slots it would add (in its order) and announce each free slot's next reset.
    Returns the new slots; nothing (and no announcement) unless ``make_env`` is a pool's."""
    if not getattr(make_env, "prefetch", False):
        return []
    free = [s for s in slots if s.spec is None]
    n_new = max(0, min(batch_size - len(slots), len(queue) - len(free)))
    new = [new_slot(make_env()) for _ in range(n_new)]
    for slot, (_, spec) in zip(free + new, reversed(queue)):
        if hasattr(slot.env, "prefetch_reset"):
            slot.env.prefetch_reset(spec.task)
    return new


def prefetch_steps(slots: list, actions: list[Optional[str]]) -> None:
    """Before a turn's steps are applied one by one: announce them all, so every worker steps at once."""
    for slot, action in zip(slots, actions):
        if action is not None and hasattr(slot.env, "prefetch_step"):
            slot.env.prefetch_step(action)


def run_pooled(runner: Any, workers: int, timeout_s: float) -> Any:
    """``runner.run()`` (a rollout ``_EpisodeRunner``), its ``make_env`` first moved into ``workers`` processes
    (``env.workers``) when ``workers > 0``; the pool stops after."""
    if workers <= 0:
        return runner.run()
    with EnvPool(runner.make_env, workers, timeout_s) as pool:
        runner.make_env = pool.make
        return runner.run()

"""Routing that only RL can learn (issue 38): one SFT draw, its RL seeds and every baseline, on the same panel.

    python -m pipeline.routing_study experiment=ring --root <artifacts> --draw 0 --seeds 0 1 2 --out docs/results/routing

``<root>`` holds the collected trajectories, the library and the game cache (``pipeline.run collect`` and
``distill`` with the same overrides). For draw D (``sft.seed=D``) it runs, each step resumable like any stage, a
training skipped when its model is there and an evaluation when its episodes are:

* ``<root>/d<D>``: SFT on the demonstrator's labels, then zero_shot, flat_skillbank, random_talent, oracle_talent and
  talent_sft evaluated;
* per RL seed S and variant V, ``<root>/d<D>/s<S>-<V>``, starting from the draw's SFT checkpoint: ``talentrl`` (the
  config's RL), ``routing_only`` (``rl.train_execution=false`` at ``--a1-steps`` updates of ``--a1-tasks`` tasks),
  ``sampled_talent_rl`` (``rl.arms=sample``: each rollout draws its own talent, the ordinary group advantage),
  ``shuffled_contrast_rl`` (``rl.shuffle_route_credit=true``) and ``relabel_sft`` (``talentrl_core.relabel``: the
  student's talents measured with talentrl's rollout budget, the router fine-tuned on the winners for as many steps
  as talentrl makes updates; ``relabel_replay_sft``: beside the draw's SFT execution samples, at the SFT's rate;
  ``relabel_replay_sft_rl_batch``: the same with RL's batch, as many samples as RL trains on); with ``--budget a1``
  every variant runs the routing-only phase at A1's budget (in ``s<S>-<variant>-a1``), so that each baseline
  differs from ``routing_only`` in its one mechanism;
* ``<root>/d<D>/oracle_sft``: SFT on the measured-best labels (``sft.routing_labels=measured_best``), evaluated as
  ``oracle_sft`` (last: the longest run and the least needed; ``--no-oracle-sft`` leaves it out).

Then ``<out>/draw<D>/seed<S>/`` gets ``episodes.jsonl`` (the draw's systems and the seed's variants under their
names; the executor after each variant's training, given the oracle talent in ``<run>/executor``, as
``oracle_talent_after_<variant>``) and ``metrics.json``, and ``<out>/draw<D>/verdicts.json`` the tests of
``routing_verdicts``; ``<out>/criteria.json`` the primary criteria over every draw whose verdicts are in ``<out>``
(``study_criteria``: met only on 3 draws or more). ``--report-only`` rebuilds ``<out>`` from the runs' evaluations
without running anything.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, Sequence

from .env import offline_defaults
from .errors import named_errors

DRAW_SYSTEMS = ("zero_shot", "flat_skillbank", "random_talent", "oracle_talent", "talent_sft")
SHARED = ("trajectories", "library", "cache")


def a1(args: argparse.Namespace) -> list[str]:
    """The routing-only phase (A1): no execution training, ``--a1-steps`` updates of ``--a1-tasks`` tasks."""
    return ["rl.train_execution=false", f"rl.steps={args.a1_steps}", f"rl.tasks_per_step={args.a1_tasks}",
            f"rl.checkpoint_every={max(1, args.a1_steps // 4)}"]


VARIANTS: dict[str, Callable[[argparse.Namespace], list[str]]] = {
    "talentrl": lambda a: [],
    "routing_only": a1,
    "sampled_talent_rl": lambda a: ["rl.arms=sample", "rl.n_arms=8", "rl.group_size=8", "rl.exec_group=task"],
    "shuffled_contrast_rl": lambda a: ["rl.shuffle_route_credit=true"],
    "relabel_sft": lambda a: [],
    "relabel_replay_sft": lambda a: [],
    "relabel_replay_sft_rl_batch": lambda a: [],
}
"Each RL-seed variant's overrides on top of the study's (the relabel ones are not RL runs)."
RELABEL = ("relabel_sft", "relabel_replay_sft", "relabel_replay_sft_rl_batch")
("The non-RL competitors: the SFT student's measured winners, fine-tuned on alone or beside the replayed SFT data; "
 "``_rl_batch``: each step a batch as large as RL's (tasks × group), as many samples as RL trained on.")


def variant_overrides(v: str, args: argparse.Namespace) -> list[str]:
    """``v``'s overrides at the study's budget: at ``--budget a1`` every variant runs the routing-only phase, so that
    the baselines differ from ``routing_only`` in their one mechanism (relabel_sft measures with its rollouts)."""
    if args.budget == "a1" and v == "talentrl":
        raise ValueError("--budget a1: talentrl in the routing-only phase is the variant routing_only; name that")
    return VARIANTS[v](args) + (a1(args) if args.budget == "a1" and v != "routing_only" else [])


def run_name(seed: int, v: str, args: argparse.Namespace) -> str:
    """The run folder under the draw: ``s<S>-<variant>``, ``-a1`` added for a baseline at the A1 budget."""
    return f"s{seed}-{v}" + ("-a1" if args.budget == "a1" and v != "routing_only" else "")


def link(root: Path, folder: Path, rels: Sequence[str]) -> Path:
    """``folder`` with each of ``rels`` a link to ``root/<rel>`` (made once)."""
    for rel in rels:
        target, at = (root / rel).resolve(), folder / rel
        if at.exists() or at.is_symlink():
            continue
        if not target.exists():
            raise FileNotFoundError(f"{target} is missing: run collect and distill into {root} (and the draw's SFT) first")
        at.parent.mkdir(parents=True, exist_ok=True)
        at.symlink_to(target, target_is_directory=True)
    return folder


def _trained(folder: Path, model: str = "sft") -> bool:
    return (folder / "models" / model / "talentrl_meta.json").is_file()


def _evaluated(folder: Path) -> bool:
    return (folder / "eval" / "episodes.jsonl").is_file() and (folder / "eval" / "metrics.json").is_file()


def run_draw(root: Path, draw: int, seeds: Sequence[int], variants: Sequence[str], overrides: Sequence[str],
             args: argparse.Namespace) -> dict[str, Path]:
    """Every run of draw ``draw``; returns ``{run name: its folder}`` (run names: ``draw``, ``oracle_sft``,
    ``s<S>-<variant>``)."""
    from talentrl_core import stages

    from .config import load_config

    def cfg(folder: Path, *more: str):
        return load_config(list(overrides) + [f"artifacts_dir={folder.resolve()}", f"sft.seed={draw}", *more])

    d = link(root, root / f"d{draw}", SHARED)
    runs = {"draw": d}
    if not _evaluated(d):
        if not _trained(d):
            stages.sft(cfg(d))
        stages.evaluate(cfg(d, f"eval.systems=[{','.join(DRAW_SYSTEMS)}]"))
    for s in seeds:
        for v in variants:
            f = runs[f"s{s}-{v}"] = link(d, d / run_name(s, v, args),
                                         SHARED + ("models/base",) + (() if v in RELABEL else ("models/sft",)))
            model = "sft" if v in RELABEL else "rl"
            if not _evaluated(f):
                c = cfg(f, f"rl.seed={s}", *variant_overrides(v, args))
                if not _trained(f, model) and v in RELABEL:
                    keep = d / "relabel" / f"{run_name(s, 'relabel_sft', args)}.json"  # the seed's measurement
                    relabel(c, d / "models" / "sft", f / "models" / "sft", s, keep, replay=v != "relabel_sft",
                            rl_batch=v == "relabel_replay_sft_rl_batch")
                elif not _trained(f, model):
                    stages.rl(c)
                stages.evaluate(cfg(f, f"rl.seed={s}", *variant_overrides(v, args),
                                    f"eval.systems=[{'talent_sft' if v in RELABEL else 'talentrl'}]"))
            e = executor_folder(f, model)  # the executor after training, given the oracle talent
            if getattr(args, "executor", True) and not _evaluated(e):
                stages.evaluate(cfg(e, "eval.systems=[oracle_talent]"))
    o = runs["oracle_sft"] = link(d, d / "oracle_sft", SHARED + ("models/base",))
    if not _evaluated(o) and getattr(args, "oracle_sft", True):
        if not _trained(o):
            no_habit = [f"sft.demonstrator_habit.{k}=1" for k in cfg(o).sft.demonstrator_habit]  # a dict override merges
            stages.sft(cfg(o, "sft.routing_labels=measured_best", "sft.routing_target=choice", *no_habit))
        stages.evaluate(cfg(o, "eval.systems=[talent_sft]"))
    return runs


def executor_folder(run: Path, model: str) -> Path:
    """``<run>/executor``: the run's trained checkpoint (``models/<model>``) in the place of the SFT checkpoint, so that
    ``oracle_talent`` evaluated there measures the executor after training (the criterion "executor not damaged")."""
    e = link(run, run / "executor", SHARED + ("models/base",))
    at = e / "models" / "sft"
    if not at.is_symlink():
        at.symlink_to((run / "models" / model).resolve(), target_is_directory=True)
    return e


def relabel(cfg, checkpoint: Path, out: Path, seed: int, keep: Path, replay: bool = False,
            rl_batch: bool = False) -> dict:
    """``relabel_sft`` at talentrl's budget: its rollouts (steps × tasks × group) measure the talents (kept in
    ``keep``, shared by the seed's relabel variants), as many SFT steps as it makes updates train the router: at its
    learning rate on the winners alone, or (``replay``: relabel_replay_sft) at the SFT's rate beside the draw's SFT
    execution samples; ``rl_batch``: each step draws as many samples as an RL update trains on (tasks × group), so
    that it sees as many samples as RL, not only as many steps."""
    from talentrl_core.knowledge import open_knowledge
    from talentrl_core.relabel import relabel_sft
    from talentrl_core.stages import family_for, pinned_library, require_library, sft_data

    rl = cfg.rl
    knowledge = require_library(open_knowledge(pinned_library(cfg, checkpoint)), cfg)
    n_talents = len(knowledge.menu(cfg.env.name))
    return relabel_sft(cfg, family_for(cfg), knowledge, str(checkpoint), out, n_tasks=rl.steps * rl.tasks_per_step,
                       rollouts=max(1, rl.group_size // n_talents), steps=rl.steps * rl.mini_batches, seed=seed,
                       lr=None if replay else rl.lr, keep=keep,
                       replay=sft_data(cfg, knowledge) if replay else None,
                       batch_size=rl.tasks_per_step * rl.group_size if rl_batch else None)


def _rows(folder: Path, keep: Sequence[str], rename: dict[str, str]) -> list[dict]:
    """The run's greedy episode rows of ``keep`` renamed; none when the run has not been evaluated (yet)."""
    if not _evaluated(folder):
        return []
    rows = [json.loads(line) for line in (folder / "eval" / "episodes.jsonl").read_text().splitlines() if line.strip()]
    return [{**r, "system": rename.get(r["system"], r["system"])} for r in rows if r["system"] in keep]


def gather(runs: dict[str, Path], seeds: Sequence[int], variants: Sequence[str], out: Path) -> dict[int, list[dict]]:
    """``<out>/seed<S>/episodes.jsonl`` + ``metrics.json`` per seed: the draw's systems, oracle_sft and the variants."""
    from talentrl_core.evaluation.metrics import EpisodeResult, build_metrics
    from talentrl_core.evaluation.routing_verdicts import AFTER
    from talentrl_core.io import write_json, write_text

    base = _rows(runs["draw"], DRAW_SYSTEMS, {}) + _rows(runs["oracle_sft"], ["talent_sft"], {"talent_sft": "oracle_sft"})
    per_seed = {}
    for s in seeds:
        rows = list(base)
        for v in variants:
            own = "talent_sft" if v in RELABEL else "talentrl"
            rows += _rows(runs[f"s{s}-{v}"], [own], {own: v})
            rows += _rows(runs[f"s{s}-{v}"] / "executor", ["oracle_talent"], {"oracle_talent": AFTER + v})
        per_seed[s] = rows
        write_text(out / f"seed{s}" / "episodes.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        write_json(out / f"seed{s}" / "metrics.json", build_metrics([EpisodeResult(**r) for r in rows]))
    return per_seed


@named_errors("pipeline.routing_study")
def main(argv: Sequence[str] | None = None) -> int:
    from talentrl_core.evaluation.routing_verdicts import routing_verdicts, study_criteria
    from talentrl_core.io import read_json, write_json

    offline_defaults()
    p = argparse.ArgumentParser(prog="python -m pipeline.routing_study", description=__doc__.split("\n")[0])
    p.add_argument("--root", required=True, type=Path, help="artifacts folder holding trajectories, library, cache")
    p.add_argument("--draw", type=int, required=True, help="the SFT draw (sft.seed)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="RL seeds")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--a1-steps", type=int, default=75, help="routing_only: RL updates")
    p.add_argument("--a1-tasks", type=int, default=16, help="routing_only: tasks per update")
    p.add_argument("--budget", choices=["a0", "a1"], default="a0",
                   help="a0: each variant at the config's RL budget (routing_only always at A1); a1: every variant in "
                        "the routing-only phase at the A1 budget, its runs in s<S>-<variant>-a1")
    p.add_argument("--out", type=Path, default=Path("docs/results/routing"))
    p.add_argument("--report-only", action="store_true", help="rebuild <out> from the runs' evaluations only")
    p.add_argument("--oracle-sft", action=argparse.BooleanOptionalAction, default=True,
                   help="train and evaluate oracle_sft (a second SFT of the draw's length) after the variants")
    p.add_argument("--executor", action=argparse.BooleanOptionalAction, default=True,
                   help="evaluate oracle_talent on each variant's trained checkpoint (the executor after training)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. experiment=ring")
    args = p.parse_args(argv)
    from .config import load_config

    load_config(args.overrides)  # a bad override (or variant at this budget) is refused before anything runs
    for v in args.variants:
        variant_overrides(v, args)
    if args.report_only:
        d = args.root / f"d{args.draw}"
        runs = {"draw": d, "oracle_sft": d / "oracle_sft"} | {f"s{s}-{v}": d / run_name(s, v, args)
                                                              for s in args.seeds for v in args.variants}
    else:
        runs = run_draw(args.root, args.draw, args.seeds, args.variants, args.overrides, args)
    out = args.out / f"draw{args.draw}"
    per_seed = gather(runs, args.seeds, args.variants, out)
    verdicts = routing_verdicts(per_seed, args.variants)
    verdicts["not_evaluated"] = sorted(name for name, folder in runs.items() if not _evaluated(folder))
    write_json(out / "verdicts.json", verdicts)
    print(json.dumps(verdicts["summary"], indent=1))
    drawn = {f.parent.name.removeprefix("draw"): f for f in args.out.glob("draw*/verdicts.json")}
    criteria = study_criteria({int(d): read_json(f) for d, f in drawn.items() if d.isdigit()})
    write_json(args.out / "criteria.json", criteria)
    print(json.dumps(criteria, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

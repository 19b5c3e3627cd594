"""The ``sft`` and ``rl`` sections: talent-aware supervised fine-tuning (``SFTConfig``) and routing + execution RL
(``RLConfig``, with the flat-GRPO baseline as ``RLConfig.as_flat_baseline``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from .checks import AT_LEAST_1, NON_NEGATIVE, POSITIVE, check_ranges


class RoutingLabels(StrEnum):
    demonstrator = "demonstrator"
    measured_best = "measured_best"


class RoutingTarget(StrEnum):
    choice = "choice"
    cue_only = "cue_only"


class ArmChoice(StrEnum):
    intervene = "intervene"
    sample = "sample"


class ExecGroup(StrEnum):
    arm = "arm"
    task = "task"


class TokenAgg(StrEnum):
    token_mean = "token_mean"
    seq_mean_token_sum = "seq_mean_token_sum"



@dataclass
class SFTConfig:
    max_steps: int = 200
    "Optimizer steps on the sample mix (a routing warm-up, routing_warmup_steps, comes on top)."
    max_minutes: float = 0.0
    "This sitting's wall-clock budget (0: none): past it the run checkpoints and stops as paused (exit code 75), and\n    the same command resumes it; not part of the job, so the schedule and the result are those of max_steps."
    lr: float = 3e-3
    "Peak learning rate."
    warmup_steps: int = 30
    "Linear warm-up steps."
    batch_size: int = 16
    "Samples per step."
    grad_accum: int = 1
    "Gradient accumulation steps."
    max_length: int = 1024
    "Token cut of one sample (its start is cut, as at generation time; capped at the model's context)."
    weight_decay: float = 0.1
    "AdamW weight decay."
    save_steps: int = 100
    "Checkpoint every N steps (for resume)."
    keep_checkpoints: int = 2
    "Checkpoints kept in <out>.work (older ones are deleted; 0 keeps all)."
    prompt_loss_weight: float = 0.0
    ("Weight of a language-modelling loss on the prompt tokens beside the answer tokens' loss: the step's loss is the "
     "answer tokens' mean NLL plus this times the prompt tokens' mean NLL (0: the answer alone, as TRL's "
     "completion-only loss; Axolotl's train_on_inputs, OpenAI's prompt_loss_weight). For a model trained from random "
     "initialisation the prompts are its only text: ~99% of the tokens, where copying (a page's value into a command) "
     "can be learnt.")
    micro_batch_size: int = 4
    "Samples per forward pass: each step's batch_size random samples run sorted by length in micro-batches of this size (less padding, the same gradient)."
    resume: bool = True
    "Resume from the last checkpoint in the output folder when there is one."
    min_skill_share: float = 0.8
    "Fail when fewer than this share of execution samples carry at least one retrieved skill."
    max_duplicate_share: float = 0.5
    "Fail when more than this share of samples are exact duplicates."
    max_cut_share: float = 0.5
    "Fail when more than this share of samples exceed max_length (or the model's context) and lose the start of their prompt, the task line with it (any cut is logged)."
    include_routing: bool = True
    "Train the routing sample (task + menu -> <talent>ID</talent>)."
    routing_weight: int = 1
    ("How often each routing sample is drawn per epoch (execution samples: once). There is one routing sample per "
     "task against several execution steps per trajectory, and the route is an association the executor's data does "
     "not teach; a mixing weight, as in dataset interleaving.")
    routing_labels: RoutingLabels = RoutingLabels.demonstrator
    ("The routing sample's label. demonstrator: one routing sample per successful demonstration, labelled with the "
     "talent of the strategy that produced it (the teacher's choice, as in the paper); measured_best: one per task, "
     "the talent whose strategy measured best on the task's type (an oracle router: SFT then holds what routing RL "
     "could learn).")
    routing_target: RoutingTarget = RoutingTarget.choice
    ("What a routing sample's loss supervises. choice: the talent (after the restated cue where env.routing_cue is "
     "set); cue_only: the restated cue alone, the talent tag unlabelled (issue 38's A2, \"recognise, then route\": SFT "
     "teaches reading the cue, RL the cue -> talent table; needs env.routing_cue).")
    demonstrator_habit: dict[str, int] = field(default_factory=dict)
    ("Strategy -> how many times each routing sample of its demonstrations counts (routing_labels=demonstrator; "
     "others: 1; a weight of 1 is no habit). A demonstrator that prefers one talent on every task, e.g. {eastnorth: 2}: greedy SFT routing "
     "then follows the habit, wrong wherever the other talent is better.")
    routing_warmup_steps: int = 0
    ("N steps on routing samples only before the max_steps steps of the weighted mix (a curriculum phase; the "
     "learning rate holds its peak through it and decays over the mix).")
    routing_warmup_until: float = 0.0
    ("End the warm-up early once, for every routing label, this share of its routing samples is predicted exactly "
     "(teacher-forced; checked every routing_warmup_check_every steps); routing_warmup_steps is then the cap. 0: a "
     "fixed warm-up.")
    routing_warmup_check_every: int = 10
    "Steps between routing-accuracy checks of the warm-up (with routing_warmup_until > 0)."
    skip_forced: bool = False
    ("Leave out execution samples whose step offered one command (besides look/inventory): constrained decoding takes "
     "such a step without asking the policy.")
    flat_share: float = 0.25
    ("Share of successful trajectories whose execution samples are rendered flat: no strategy line, skills retrieved "
     "without the talent term (talent dropout). The flat SkillBank baseline then runs on prompts its checkpoint was "
     "trained on, as a SkillBank SFT on the same demonstrations would; chosen per trajectory by a seeded hash.")
    dagger_rounds: int = 0
    ("DAgger rounds after behaviour cloning (talentrl_core/dagger.py): the student plays training games mixed with "
     "the teacher, every state it reaches is labelled with the teacher's command, and SFT continues on the aggregate. "
     "0: behaviour cloning only.")
    dagger_games: int = 256
    "Training games the student plays per DAgger round (drawn with the round's seed)."
    dagger_beta: float = 0.5
    "Share of a DAgger round's steps that play the teacher's command instead of the student's (BUTLER's fraction_assist)."
    dagger_steps: int = 500
    "SFT steps of each DAgger round, from the previous round's model, on the demonstrations plus every labelled state."
    dagger_weight: int = 1
    "How often each DAgger-labelled sample is drawn per epoch (1: the plain aggregate, as in DAgger)."
    dagger_routing_warmup: int = 0
    ("Routing-only steps at the start of each DAgger round, a cap (the warm-up ends once every routing label passes "
     "sft.routing_warmup_until, 0.9 when that is 0): for a router the behaviour-cloning mix did not teach.")
    dagger_teacher: str = ""
    "The strategy expert that labels the student's states; empty: the one collect.strategies imitated."
    seed: int = 0
    "Training seed."

    def __post_init__(self) -> None:
        check_ranges("sft", self, dagger_rounds=NON_NEGATIVE, dagger_games=AT_LEAST_1, dagger_steps=AT_LEAST_1,
                     dagger_weight=AT_LEAST_1, dagger_routing_warmup=NON_NEGATIVE, dagger_beta=("in [0, 1]", lambda v: 0.0 <= v <= 1.0),
                     max_steps=AT_LEAST_1, lr=POSITIVE, batch_size=AT_LEAST_1, warmup_steps=NON_NEGATIVE,
                     save_steps=AT_LEAST_1, keep_checkpoints=NON_NEGATIVE, max_minutes=NON_NEGATIVE, weight_decay=NON_NEGATIVE, grad_accum=AT_LEAST_1,
                     routing_weight=AT_LEAST_1, routing_warmup_steps=NON_NEGATIVE, prompt_loss_weight=NON_NEGATIVE,
                     routing_warmup_until=("in [0, 1]", lambda v: 0.0 <= v <= 1.0),
                     routing_warmup_check_every=AT_LEAST_1,
                     flat_share=("in [0, 1]", lambda v: 0.0 <= v <= 1.0),
                     max_cut_share=("in [0, 1]", lambda v: 0.0 <= v <= 1.0),
                     max_length=(">= 256: shorter samples lose their prompt", lambda v: v >= 256))
        bad = {k: v for k, v in self.demonstrator_habit.items() if int(v) < 1}
        if bad:
            raise ValueError(f"sft.demonstrator_habit={dict(self.demonstrator_habit)}: weights must be >= 1, got {bad}")
        if any(int(v) != 1 for v in self.demonstrator_habit.values()) and self.routing_labels != RoutingLabels.demonstrator:
            raise ValueError(f"sft.demonstrator_habit={dict(self.demonstrator_habit)} needs sft.routing_labels=demonstrator "
                             f"(got {self.routing_labels}: one measured-best label per task); a weight of 1 is no habit "
                             "(Hydra merges a dict override, so sft.demonstrator_habit.<strategy>=1 turns one off)")
        if self.routing_warmup_steps and not self.include_routing:
            raise ValueError(f"sft.routing_warmup_steps={self.routing_warmup_steps} needs sft.include_routing=true "
                             "(the warm-up trains on routing samples)")
        if self.routing_warmup_until and not self.routing_warmup_steps:
            raise ValueError(f"sft.routing_warmup_until={self.routing_warmup_until} needs sft.routing_warmup_steps > 0 "
                             "(the cap of the warm-up it ends early)")
        if self.max_minutes and not self.resume:
            raise ValueError(f"sft.max_minutes={self.max_minutes:g} needs sft.resume=true: a paused run continues from its "
                             "checkpoint on the next call")
        if self.micro_batch_size < 1 or self.batch_size % self.micro_batch_size:
            raise ValueError(f"sft.batch_size={self.batch_size} must be a positive multiple of sft.micro_batch_size="
                             f"{self.micro_batch_size}: set sft.micro_batch_size to a divisor of it")


@dataclass
class RLConfig:
    flat_baseline: bool = False
    "Flat-skill GRPO baseline: no routing sample, λ = 0, one arm (same loss)."
    steps: int = 20
    "RL updates."
    tasks_per_step: int = 4
    "Tasks per update (each a group)."
    group_size: int = 8
    "Rollouts per task (all arms together)."
    n_arms: int = 2
    "M: talent arms per group (arm 1: sampled talent; 2..M: next most likely talents)."
    no_talent_arm: bool = False
    "Add an arm without a talent (counted within n_arms)."
    alpha_route: float = 1.0
    "α_route: weight of the routing loss."
    arms: ArmChoice = ArmChoice.intervene
    ("intervene: arm 1 the sampled talent, arms 2..M the next most likely (matched interventions: TalentRL); sample: "
     "every arm draws its own talent from the router, with replacement, so that with n_arms = group_size the routing "
     "token gets the rollout's ordinary group advantage (the sampled_talent_rl baseline; needs exec_group=task).")
    train_execution: bool = True
    ("False: a routing-only phase: the arms' rollouts give the routing contrast and no execution sample is trained "
     "(the executor is left as SFT made it).")
    shuffle_route_credit: bool = False
    ("Permute the routing advantages across the step's tasks (seeded): the shuffled_contrast_rl control, as much "
     "training as TalentRL with the credit of another task.")
    beta_kl: float = 0.0
    "β: KL penalty to the reference model (0: off, no reference kept)."
    clip_eps: float = 0.2
    "PPO clip ε."
    ppo_epochs: int = 1
    "Optimisation passes over each batch."
    mini_batches: int = 1
    "Optimizer steps per pass: each pass splits the step's samples (seeded shuffle) into this many mini-batches,\n    one AdamW step each (verl's ppo_mini_batch_size, TRL's steps_per_generation); the later ones are off-policy,\n    which is what the PPO clip is for. Same forward/backward work as 1."
    lr: float = 1e-4
    "Learning rate."
    max_grad_norm: float = 1.0
    "Gradient clipping."
    exec_group: ExecGroup = ExecGroup.arm
    "Execution advantage normalised within an arm (default) or over the whole task group (ablation)."
    token_agg: TokenAgg = TokenAgg.token_mean
    "Loss aggregation over tokens."
    filter_zero_var: bool = True
    "Drop groups whose rewards are all equal (dynamic sampling)."
    skip_zero_advantage: bool = True
    "Skip the forward/backward of micro-batches whose every advantage is 0 when beta_kl = 0: they add exactly 0 to the\n    gradient (the aggregate's denominator still counts them), so the update is bitwise the same. False: run them anyway."
    share_prefix: bool = True
    "Micro-batches of samples that start alike (same task: system text, task, skills; sorted by their tokens), whose\n    common prompt prefix is read once per micro-batch and shared by its rows. The same loss and gradient up to float\n    rounding, on fewer tokens. False: one micro-batch per similar length, every row read in full."
    aem: bool = False
    "AEM-style surprisal modulation of advantages (ours; off by default)."
    aem_eta0: float = 0.5
    "η_0: modulation strength, scheduled from +η_0 to -η_0."
    aem_clip: float = 2.0
    "c: modulation factor clipped to [1/c, c]."
    eps: float = 1e-6
    "ε in advantage normalisation."
    checkpoint_every: int = 5
    "Save a resumable checkpoint every N updates."
    max_minutes: float = 0.0
    "This sitting's wall-clock budget (0: none): past it the run checkpoints after the update it is in and stops as\n    paused (exit code 75); the same command resumes it. Not part of the job."
    resume: bool = True
    "Resume from the last checkpoint when there is one."
    evolve_every: int = 0
    "Library evolution every E updates (0: off)."
    seed: int = 0
    "RL seed."
    micro_batch_size: int = 16
    "Samples per forward/backward pass; an update accumulates gradients over all of a step's samples."
    rollout_batch_size: int = 64
    "Environments advanced together in the rollout loop (all groups of a step go through one call)."
    warmup_steps: int = 0
    "Linear warm-up (optimizer steps) before the linear decay to 0 at the last update."
    weight_decay: float = 0.0
    "AdamW weight decay."
    keep_checkpoints: int = 2
    "Resumable checkpoints kept in <out>.work (older ones are deleted; 0 keeps all)."
    split: str = "train"
    "Split RL draws its tasks from (training tasks only: never an evaluation panel)."
    evolve_success_threshold: float = 0.5
    "Evolution: task types whose step success rate is below this get candidate skills."
    evolve_max_candidates: int = 2
    "Evolution: candidates proposed (and each tested with matched rollouts) per env and evolution."
    evolve_min_gain: float = 0.0
    "Evolution: promote a candidate only when success with it minus without it is > 0 and >= this."
    evolve_tasks: int = 2
    "Evolution: tasks of the candidate's type in each matched test (group_size/n_arms rollouts per arm each)."

    def as_flat_baseline(self) -> "RLConfig":
        """These settings as the flat-GRPO baseline trains them (what ``rl=flat_grpo`` selects): flat retrieval, no
        routing sample, one arm."""
        return replace(self, flat_baseline=True, n_arms=1, no_talent_arm=False)

    def __post_init__(self) -> None:
        if self.n_arms < 1 or self.group_size < 1:
            raise ValueError("rl.n_arms and rl.group_size must be >= 1")
        if self.tasks_per_step < 1 or self.micro_batch_size < 1 or self.rollout_batch_size < 1:
            raise ValueError("rl.tasks_per_step, rl.micro_batch_size and rl.rollout_batch_size must be >= 1")
        if self.ppo_epochs < 1:
            raise ValueError(f"rl.ppo_epochs={self.ppo_epochs}: make it >= 1")
        if self.mini_batches < 1:
            raise ValueError(f"rl.mini_batches={self.mini_batches}: make it >= 1")
        check_ranges("rl", self, steps=AT_LEAST_1, lr=POSITIVE, clip_eps=POSITIVE, beta_kl=NON_NEGATIVE,
                     max_grad_norm=POSITIVE, weight_decay=NON_NEGATIVE, warmup_steps=NON_NEGATIVE,
                     alpha_route=NON_NEGATIVE, keep_checkpoints=NON_NEGATIVE, checkpoint_every=NON_NEGATIVE,
                     max_minutes=NON_NEGATIVE)
        if self.max_minutes and not self.resume:
            raise ValueError(f"rl.max_minutes={self.max_minutes:g} needs rl.resume=true: a paused run continues from its "
                             "checkpoint on the next call")
        if self.n_arms < 2 and not self.flat_baseline:
            raise ValueError(f"rl.n_arms={self.n_arms}: TalentRL contrasts rollouts under different talents, so it needs "
                             "rl.n_arms >= 2 (one arm is the flat baseline: rl.flat_baseline=true)")
        if self.arms == ArmChoice.sample and self.exec_group != ExecGroup.task:
            raise ValueError(f"rl.arms=sample draws a talent per arm, so an arm may hold one rollout: set "
                             f"rl.exec_group=task (got {self.exec_group})")
        if not self.train_execution and (self.flat_baseline or not self.alpha_route):
            raise ValueError("rl.train_execution=false trains the routing loss only: it needs rl.alpha_route > 0 and "
                             "not the flat baseline (which has no routing sample)")
        if self.no_talent_arm and self.n_arms < 2 and not self.flat_baseline:
            raise ValueError("rl.no_talent_arm counts within rl.n_arms: set rl.n_arms >= 2 so one talent arm remains")
        if self.group_size < 2:
            raise ValueError(f"rl.group_size={self.group_size}: a group of one rollout has no relative advantage and no "
                             "talent contrast, so nothing would train (make it >= 2)")
        if self.group_size % self.n_arms:
            raise ValueError(
                f"rl.group_size={self.group_size} must be a multiple of rl.n_arms={self.n_arms} "
                "(every arm gets the same number of rollouts)"
            )

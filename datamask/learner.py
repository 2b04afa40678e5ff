"""DATAMASK: the selection mask learned by policy gradient (Fan, Xian, Sun, Shen; ICLR 2026).

One logit per candidate row. Each step draws G masks of exactly k rows from softmax(logits) by
Gumbel-top-k, scores all G with the joint objective in one batch, standardises the scores within the
group into advantages, and moves the logits up the policy gradient. At the end the k rows with the
largest logits are the selection. `policy_step` is the method, one step in one sitting;
`MaskLearner.fit` is the loop around it (device, checkpoints, logging, read-off).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, fields
from itertools import accumulate
from typing import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from .data import Dataset, atomic_output, budget
from .errors import UserError, quoted
from .greedy import BATCHED_ROUNDS, Optimizer
from .objectives import (DIVERSITY, FacilityLocation, GroundSet, Joint, Quality, SetFunction,
                         TermScale, certificate, certificate_fields, certify, diversity,
                         joint_greedy, knn_greedy, knn_kernel, probing_saves_work,
                         random_probes)
from .objectives.joint import SCALE_GROUNDS
from .objectives.sparse_facility import NEIGHBOURS, default_nlist
from .options import Range, option, validate
from .paths import remove_temporaries
from .sampling import gumbel_topk, plackett_luce_log_prob
from .shared import require_installed, resolve_device, top_rows

LR_SCHEDULES = ("linear", "cosine", "constant")
AUTO_PROBES = 64  # --probes -1 for DiSF: the cheapest count keeping 99% (ablation-probes.md)
GREEDY_INIT_ROWS = 20_000  # --init auto starts Facility from a greedy up to the size measured
GREEDY_STARTS = ("greedy", "knn")  # the --init values whose start is a greedy's picks
# --init knn: facility-knn-greedy's neighbours and probes, on about sqrt(N) inverted lists (16
# searched are 7% of them at 50,000 rows), so the search costs a few percent of the exact one and
# the lists' k-means a quarter of faiss's default 4 sqrt(N)'s
KNN_START_LISTS_PER_ROOT = 1.0
GIVE_UP_AFTER = 0.25  # --give_up_after -1 (Facility, DiSF alone): a quarter of the start's time
# --give_up_after -1 for DiSF weighed with quality, in start's times: twice the most its steps
# took to first beat their start on the cells seen (reproduce/results/defaults/start-budget/)
DISF_JOINT_GIVE_UP_AFTER = 8.0
STOP_SHARE = 0.99  # --stop_share -1 for Pair_simi's start: 0.99 of any greedy's gain, proven
DIVERSITY_METRICS = tuple(DIVERSITY)


# the fields whose flags the original train_mask.py had, by its names; `datamask select` lists
# them in a group of their own
TRAIN_MASK_FLAGS = ("algorithm", "lamb", "n_rollout", "n_epochs", "partial", "max_lr", "min_lr",
                    "init", "seed", "device")


@dataclass
class LearnerConfig:
    """Hyper-parameters, named as the flags of the original train_mask.py where it had them
    (TRAIN_MASK_FLAGS); `datamask select`'s flags, help and checks are generated from here."""

    algorithm: str = option("Pair_simi", "diversity metric joined with quality",
                            choices=DIVERSITY_METRICS)
    select_ratio: float = option(0.1, "fraction of ALL input rows to select",
                                 within=Range(0.0, 1.0, open_low=True, open_high=True), flag=False)
    lamb: float = option(0.5, "weight of quality; 1 - lamb weighs diversity; both terms "
                              "standardised by their spread over random masks",
                         within=Range(0.0, 1.0))
    n_rollout: int = option(128, "G, masks sampled per step (paper: 128 or 256); at least 2, "
                                 "since advantages need a group", within=Range(2))
    n_epochs: int = option(2000, "optimisation steps; with the stopping rule (--stop_every) "
                                 "the most it may take; 0 writes the start (a greedy start "
                                 "alone, with --init greedy)", within=Range(0))
    partial: float = option(0.1, "fraction of the candidate rows each step samples from and "
                                 "updates (paper: 0.05-0.1; 1 = all rows every step); select "
                                 "raises it, when not given, where a step's masks would hold 1 "
                                 "row",
                            within=Range(0.0, 1.0, open_low=True))
    max_lr: float = option(10.0, "learning rate at the first step (positive)")
    min_lr: float = option(1.0, "learning rate at the last step, for --lr_schedule linear or "
                                "cosine (0 or more)")
    lr_schedule: str = option("constant", "constant at --max_lr (the best of make ablation-lr), "
                                          "or from --max_lr to --min_lr: linear (the original "
                                          "train_mask.py's) or cosine", choices=LR_SCHEDULES)
    init: str = option("auto", "initial logits: same (equal; the paper's), quality, greedy (a "
                               "greedy's picks start high), knn (Facility alone, on a kNN "
                               "kernel), auto: docs/select.md#the-learners-flags",
                       choices=("auto", "same", "quality", "greedy", "knn"))
    start_optimizer: str = option("auto", "the greedy start's optimiser: stochastic (about N ln "
                                          "100 gains), lazy (the exact greedy's picks), batched "
                                          "or auto: docs/select.md#the-learners-flags",
                                  choices=("stochastic", "lazy", "batched", "auto"))
    start_rounds: int = option(BATCHED_ROUNDS, "the batched start's rounds, each taking the "
                                               "best ceil(k / rounds) rows of one pass",
                               within=Range(1))
    start_scale: str = option("auto", "the start's and checks' term scale: step, input (the "
                                      "report's), sampled (its first masks) or auto: "
                                      "docs/select.md#the-learners-flags",
                              choices=("step", "input", "sampled", "auto"))
    prune_ratio: float = option(0.0, "drop this fraction of rows, lowest quality first, before "
                                     "learning (paper: 0.4-0.5)",
                                within=Range(0.0, 1.0, open_high=True))
    logprob: str = option("simple", "log P(mask): sum of log-softmax over the selected rows "
                                    "(paper), or the exact Plackett-Luce probability of the draw "
                                    "order", choices=("simple", "exact"))
    scale_on: str = option("step", "fit the spreads that put quality and diversity on one scale "
                                   "on random masks of a partial step's shape, or of the full "
                                   "budget on all rows (the shape --report scores; slower for "
                                   "Facility)", choices=("step", "input"))
    readoff: str = option("topk", "final subset: top-k of the final logits, or one draw from the "
                                  "final policy", choices=("topk", "sample"))
    credit: str = option("mask", "what a step's advantages credit: each sampled mask (paper), or "
                                 "each selected row by its marginal contribution to its mask",
                         choices=("mask", "row"))
    cover_sample: float = option(0.0, "Facility with --partial 1: measure each step's coverage "
                                      "on this fraction of the candidates, drawn afresh "
                                      "(unbiased); 0 = on all of them", within=Range(0.0, 1.0))
    probes: int = option(-1, "DiSF: estimate each mask's collapse score with this many random "
                             "directions (unbiased; exact where no cheaper); 0 = exact (paper); "
                             f"-1 = {AUTO_PROBES} for DiSF, exact otherwise "
                             "(docs/select.md#the-learners-flags)", within=Range(-1))
    update: str = option("ascent", "the logit update: plain gradient ascent (paper), or Adam "
                                   "(per-logit adaptive step, moments of the rows a step "
                                   "moves; a logit moves by about the rate per step, so give "
                                   "it a smaller --max_lr)", choices=("ascent", "adam"))
    stop_every: int = option(50, "the stopping rule: score the selection it would write every "
                                 "this many steps, stop once the best stalls, write the best; "
                                 "0 = off (docs/method.md#when-the-learner-stops)", within=Range(0))
    stop_window: int = option(4, "the stopping rule's window, in checks: stop once the best "
                                 "rose by at most --stop_tolerance over this many checks",
                              within=Range(1))
    stop_tolerance: float = option(0.01, "the stopping rule's tolerance, a fraction of the "
                                         "best's rise since the first check",
                                   within=Range(0.0, 1.0))
    best_from: str = option("auto", "what the stopping rule's best may be: check (the checks' "
                                    "read-offs), start (also the start's, step 0), auto (start "
                                    "where --init starts from a greedy, else check)",
                            choices=("check", "start", "auto"))
    stall_on: str = option("checks", "what the stopping rule's stall is tested on: checks (their "
                                     "own best: a run goes on while they rise) or best (the start "
                                     "included); the best is written either way",
                           choices=("checks", "best"))
    give_up: int = option(-1, "stop once this many checks have not beaten a scored start, and "
                              "write the start; 0 = never; -1 = 1 for Facility and for "
                              "Pair_simi's greedy start (docs/select.md#the-learners-flags)",
                          within=Range(-1))
    give_up_after: float = option(-1.0, "stop at a check past this many times the start's time "
                                        "(plus --give_up_grace) after it, unless a check beat "
                                        "it; 0 = off: docs/select.md#the-learners-flags",
                                  within=Range(-1.0))
    give_up_grace: float = option(0.5, "seconds added to --give_up_after's budget",
                                  within=Range(0.0))
    budget_check: str = option("step", "when --give_up_after's budget is read: at the checks "
                                        "(check), or after every step, a check then run at once "
                                        "(step)", choices=("check", "step"))
    stop_share: float = option(-1.0, "write the start, no step, once its certificate holds this "
                                     "share of the room above random; 0 = off; -1 = auto: "
                                     "docs/select.md#the-learners-flags", within=Range(-1.0, 1.0))
    start_only: str = option("auto", "write the greedy start with no step: on, off, or auto (on "
                                     "for Facility from its exact or kNN greedy start: "
                                     "docs/select.md#the-learners-flags)",
                             choices=("on", "off", "auto"))
    certificate: str = option("on", "bound the optimum and report the start's and the written "
                                    "selection's share of it, after the timed run (Facility: "
                                    "seconds at 20,000 rows): on or off "
                                    "(docs/method.md#how-near-the-optimum)",
                              choices=("on", "off"))
    patience: int = option(0, "an older rule, on the sampled masks' mean objective: stop once "
                              "its mean over this many steps rose by less than --min_gain of its "
                              "rise so far; needs --stop_every 0; 0 = off", within=Range(0))
    min_gain: float = option(0.01, "--patience's threshold, a fraction of the rise so far",
                             within=Range(0.0, 1.0, open_low=True))
    term_scale: tuple[float, ...] | None = option(
        None, "a fixed term scale (quality's mean and spread, then diversity's): the steps, the "
              "start and the checks all score on it and none is fitted (--scale_on and "
              "--start_scale unused); select's blocks get the whole input's", flag=False)
    seed: int = option(0, "same seed, same device: same selection")
    device: str = option("auto", "cpu, cuda, cuda:N or auto (CUDA when available)")

    def validate(self) -> None:
        validate(self)

    def start_init(self, rows: int) -> str:
        """The initial logits a run on `rows` input rows takes: --init, with auto resolved."""
        if self.init != "auto":
            return self.init
        if self.algorithm in ("Pair_simi", "DiSF") or rows <= GREEDY_INIT_ROWS:
            return "greedy"  # Facility's exact greedy grows as N^2: only up to the size measured
        # past it Facility alone starts from its kNN greedy, no worse than equal logits on gain
        # or time where both ran (defaults/facility-knn-start/); no start was judged with quality
        return "knn" if self.lamb == 0 else "same"

    def pair_greedy_start(self, rows: int) -> bool:
        """Whether `auto` starts Pair_simi (lamb < 1) from its batched greedy (on the report's
        scale where quality is weighed too), writes it at once where its certificate holds
        STOP_SHARE of the room above random, and else gives up at the first check that does not
        beat it: from a greedy start, at every size (its rounds cost N d each, nothing N^2;
        reproduce/results/defaults/cheap-starts/ and pair-start-past-20k/)."""
        return (self.algorithm == "Pair_simi" and self.lamb < 1
                and self.start_init(rows) == "greedy")

    def start_optimizer_of(self, rows: int) -> str:
        """The greedy start's optimiser on `rows` input rows, auto resolved: the exact (lazy)
        greedy for Facility, whose start is only taken where its dense kernel is built anyway;
        batched for Pair_simi where `pair_greedy_start` (its steps are small ops, whose overhead
        is the exact greedy's cost); stochastic else."""
        if self.start_optimizer != "auto":
            return self.start_optimizer
        if self.algorithm == "Facility":
            return "lazy"
        return "batched" if self.pair_greedy_start(rows) else "stochastic"

    def give_up_of(self, rows: int) -> int:
        """--give_up on `rows` input rows, -1 resolved: Facility's steps never beat its scored
        start on any family measured (reproduce/results/defaults/facility/), nor Pair_simi's
        its greedy start (`pair_greedy_start`), nor DiSF's weighed alone (lamb 0) within its
        time budget (defaults/stochastic-start/), so they give up at the first check."""
        if self.give_up >= 0:
            return self.give_up
        alone_disf = self.algorithm == "DiSF" and self.lamb == 0
        return 1 if (self.algorithm == "Facility" or alone_disf
                     or self.pair_greedy_start(rows)) else 0

    def start_scale_of(self, rows: int) -> str:
        """--start_scale on `rows` input rows, auto resolved: input where `pair_greedy_start`;
        sampled for Facility's greedy start, whose full-budget fit costs more than its greedy
        (16.8 s at 20,000 rows); step else, and wherever one term alone is weighed (lamb 0 or
        1), whose greedy and checks order selections the same on any scale."""
        if not 0 < self.lamb < 1:
            return "step"
        if self.start_scale != "auto":
            return self.start_scale
        if self.algorithm == "Facility" and self.start_init(rows) == "greedy":
            return "sampled"
        return "input" if self.pair_greedy_start(rows) else "step"

    def stop_share_of(self, rows: int) -> float:
        """--stop_share on `rows` input rows, -1 resolved: STOP_SHARE where `pair_greedy_start`,
        whose bound costs a few products with the rows; off elsewhere (Facility's bound costs
        about its greedy's time, DiSF has none)."""
        if self.stop_share >= 0:
            return self.stop_share
        return STOP_SHARE if self.pair_greedy_start(rows) else 0.0

    def start_only_of(self, rows: int) -> bool:
        """--start_only on `rows` input rows, auto resolved: on for Facility from its exact
        (lazy) greedy start, whose steps wrote the start on every Facility cell of the defaults
        benchmark, both lambs (reproduce/results/defaults/start-only/), and from its kNN start
        (`--init knn`), whose purpose is a start within the kNN greedy's time; off elsewhere."""
        if self.start_only != "auto":
            return self.start_only == "on"
        init = self.start_init(rows)
        return self.algorithm == "Facility" and (
            init == "knn" or init == "greedy" and self.start_optimizer_of(rows) == "lazy")

    def give_up_after_of(self) -> float:
        """--give_up_after, -1 resolved: GIVE_UP_AFTER for Facility, and for DiSF weighed alone
        (lamb 0); DISF_JOINT_GIVE_UP_AFTER for DiSF with quality, twice the latest its steps
        first beat their start on the cells seen (defaults/start-budget/); off for Pair_simi,
        whose steps climb past their start too slowly for a budget (defaults/after-start/)."""
        if self.give_up_after >= 0:
            return self.give_up_after
        if self.algorithm == "DiSF" and self.lamb > 0:
            return DISF_JOINT_GIVE_UP_AFTER
        return GIVE_UP_AFTER if self.algorithm == "Facility" or self.algorithm == "DiSF" else 0.0

    def scores_start(self, rows: int) -> bool:
        """Whether the stopping rule scores the starting read-off (--best_from, auto resolved)."""
        if not self.stop_every or self.best_from == "check":
            return False
        return self.best_from == "start" or self.start_init(rows) in GREEDY_STARTS

    def step_probes(self) -> int:
        """The probes a step uses: --probes, with -1 resolved (AUTO_PROBES for DiSF, else 0)."""
        if self.probes >= 0:
            return self.probes
        return AUTO_PROBES if self.algorithm == "DiSF" else 0

    def check_together(self) -> None:
        if not (math.isfinite(self.max_lr) and math.isfinite(self.min_lr)):
            raise UserError(f"--max_lr and --min_lr must be finite, got {self.max_lr} and "
                            f"{self.min_lr}")
        if not (self.max_lr > 0 and self.min_lr >= 0):  # a negative rate descends the objective
            raise UserError(f"--max_lr must be positive and --min_lr 0 or more, got "
                            f"{self.max_lr} and {self.min_lr}")
        if self.credit == "row" and self.logprob == "exact":
            raise UserError("--credit row scatters each row's advantage onto its own logit, "
                            "the --logprob simple gradient; it has no --logprob exact form")
        if self.cover_sample > 0 and self.algorithm != "Facility":
            raise UserError(f"--cover_sample samples the rows Facility's coverage is measured "
                            f"on; --algorithm {self.algorithm} has no such rows")
        if self.probes > 0 and self.algorithm != "DiSF":
            raise UserError(f"--probes estimates DiSF's collapse score; --algorithm "
                            f"{self.algorithm} has no such score")
        if self.patience and self.stop_every:
            raise UserError(f"--patience {self.patience} and --stop_every {self.stop_every} are "
                            f"two stopping rules: give --stop_every 0 to use --patience")
        if self.init == "knn" and (self.algorithm != "Facility" or self.lamb != 0):
            raise UserError(f"--init knn starts Facility weighed alone from its kNN greedy: give "
                            f"--algorithm Facility --lamb 0 with it (got --algorithm "
                            f"{self.algorithm} --lamb {self.lamb})")
        if self.cover_sample > 0 and self.partial < 1:
            raise UserError(f"--cover_sample draws masks over all candidates: give --partial 1 "
                            f"with it (got --partial {self.partial})")


@dataclass
class LearnResult:
    selected: np.ndarray  # (N,) bool, exactly `budget(select_ratio, N)` True
    logits: np.ndarray  # (N,) float32 final logits; -inf for rows removed by quality pruning
    history: list[dict] = field(default_factory=list)  # one record per step
    wall_time_s: float = 0.0  # optimisation time (the stopping rule's checks included),
    # excluding any `evaluate` callback
    steps_taken: int = 0  # n_epochs, or fewer where a stopping rule stopped the run
    best_step: int | None = None  # the stopping rule's best check, whose read-off is `selected`
    stop_reason: str = "steps"  # steps (all n_epochs ran), stopping_rule, patience or
    # certificate (--stop_share: the start was near enough the bound for no step)
    objective_start: float | None = None  # the joint objective of the start's read-off
    objective_written: float | None = None  # the joint objective of `selected`
    certificate: dict = field(default_factory=dict)  # `certificate_fields` of start and written

    @property
    def written_step(self) -> int:
        """The step whose read-off is `selected`: the best check's (0: the start), else the last."""
        return self.steps_taken if self.best_step is None else self.best_step

    def summary(self) -> dict:
        """What the run did, as `datamask select` prints it (docs/select.md#what-a-run-did)."""
        return {"steps_run": self.steps_taken, "stop_reason": self.stop_reason,
                "written_step": self.written_step, "objective_start": self.objective_start,
                "objective_written": self.objective_written, **self.certificate}


def learning_rate(schedule: str, step: int, n_steps: int, max_lr: float, min_lr: float) -> float:
    """max_lr at step 0 to min_lr at the last step: 'linear' (the original train_mask.py's),
    'cosine' (half a cosine: slow at both ends), or 'constant' (max_lr throughout)."""
    progress = 0.0 if n_steps == 1 else step / (n_steps - 1)
    if schedule == "constant":
        return max_lr
    if schedule == "cosine":
        return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return max_lr + (min_lr - max_lr) * progress



def candidate_rows(quality: np.ndarray, prune_ratio: float, k: int) -> np.ndarray:
    """Rows kept by quality pruning: the best ceil((1 - prune_ratio) N), ties to the lower index."""
    n = len(quality)
    keep = math.ceil((1.0 - prune_ratio) * n - 1e-9)
    if keep < k:
        raise UserError(
            f"--prune_ratio {prune_ratio} keeps {keep} rows, fewer than the {k} to select"
        )
    order = np.lexsort((np.arange(n), -quality.astype(np.float64)))
    return np.sort(order[:keep])


def initial_logits(quality: torch.Tensor, init: str) -> torch.Tensor:
    """'same': all zero. 'quality': log of the quality, made positive first when it is not
    (shifted so the worst row keeps 1% of the quality range), so P(select) is proportional to it."""
    if init == "same":
        return torch.zeros_like(quality)
    q = quality.double()
    if q.min() <= 0:
        spread = float(q.max() - q.min()) or 1.0
        q = q - q.min() + 0.01 * spread
    return q.log().to(quality.dtype)


# --init greedy holds Facility's kernel up to this, else rows on demand: 20,000 rows (the largest
# Facility starts from a greedy on) need 1.6 GB, which the reference lazy greedy holds (up to 8 GB)
GREEDY_KERNEL_BYTES = 2**31


def greedy_logits(ground: GroundSet, objective: Joint, algorithm: str, k: int,
                  gen: torch.Generator, optimizer: str = "stochastic",
                  rounds: int = BATCHED_ROUNDS) -> torch.Tensor:
    """--init greedy: the greedy's k picks (`optimizer`: stochastic, lazy for the exact
    greedy's picks, or batched in `rounds` passes) on the run's own joint objective get logit
    ln(N/k), every other row 0. The
    picks then hold about half the policy's mass (k e^c = N), so the first steps still sample
    outside them, and a top-k read-off gives the greedy's set."""
    picks, _ = joint_greedy(objective, ground, algorithm, k, GREEDY_KERNEL_BYTES,
                            Optimizer(optimizer, generator=gen, rounds=rounds))
    return picks_logits(ground, picks)


def knn_start_lists(rows: int) -> int:
    """--init knn's inverted lists on `rows` rows: about sqrt(rows) (`default_nlist`'s cap)."""
    return default_nlist(rows, KNN_START_LISTS_PER_ROOT)


def knn_greedy_logits(ground: GroundSet, k: int, seed: int) -> torch.Tensor:
    """--init knn: facility-knn-greedy's lazy picks on an IVF kNN kernel (`--index ivf
    --nlist knn_start_lists(N)`, its neighbours and probes) as `greedy_logits` sets them;
    Facility weighed alone only."""
    kernel = knn_kernel(ground.unit, NEIGHBOURS, "ivf", knn_start_lists(len(ground)), seed=seed)
    picks, _, _ = knn_greedy(ground, kernel, k, "lazy")
    return picks_logits(ground, picks)


def picks_logits(ground: GroundSet, picks: list[int]) -> torch.Tensor:
    """Logit ln(N/k) for each of the k picks, 0 for every other row."""
    logits = torch.zeros(len(ground), dtype=ground.quality.dtype, device=ground.device)
    logits[torch.as_tensor(picks, device=ground.device)] = math.log(len(ground) / len(picks))
    return logits


def fingerprint(data: Dataset) -> dict:
    """What a checkpoint must match to be resumed on: row count, feature length, a hash of the
    ids and quality, and a hash of every feature byte (about 0.7 GB/s, so it is computed once per
    dataset and kept on it: a changed embedding with the same ids is caught)."""
    cached = getattr(data, "_fingerprint", None)
    if cached is None:
        features = hashlib.sha256(memoryview(np.ascontiguousarray(data.features)).cast("B"))
        cached = {"rows": len(data), "dim": data.dim,
                  "ids_quality": hashlib.sha256(data.ids.tobytes()
                                                + data.quality.tobytes()).hexdigest(),
                  "features": features.hexdigest()}
        data._fingerprint = cached
    return cached


# settings whose default is not how runs went before the setting existed: a checkpoint without
# them ran like this, so resuming it at today's default is refused as a change, not run silently
BEFORE_THEY_EXISTED = {"probes": 0,  # -1 now means 64 probes for DiSF; older runs were exact
                       "stop_every": 0,  # older runs ran every step and wrote the last read-off
                       "best_from": "check",
                       "stall_on": "best",  # the stall was tested on the best, start included
                       "start_scale": "step", "give_up_after": 0.0, "stop_share": 0.0,
                       "budget_check": "check", "start_only": "off"}
CHECKPOINT_KEYS = ("config", "fingerprint", "step", "logits", "generator", "scale", "elapsed_s",
                   "history")
FINGERPRINT_WORDS = {"rows": "row count", "dim": "feature length", "ids_quality": "ids or quality",
                     "features": "features"}


def save_checkpoint(path: str, state: dict) -> None:
    """Write the state under a temporary name and rename it: a crash leaves the previous
    checkpoint whole, and a failed save removes its temporary file."""
    with atomic_output(path) as tmp:
        torch.save(state, tmp)


def resolved(settings: dict, rows: int) -> dict:
    """`settings` with each auto replaced by what it does on `rows` input rows, and the stall test
    at one value where no start is scored (the two are then one rule): what a resume compares, so
    a checkpoint resumes under a default that means what it ran."""
    config = LearnerConfig(**{f.name: settings[f.name] for f in fields(LearnerConfig)})
    rule, init = StoppingRule.of(config, rows), config.start_init(rows)
    return {**settings, "init": init,
            "start_optimizer": (config.start_optimizer_of(rows) if init == "greedy"
                                else "stochastic"),
            "best_from": "start" if rule.scores_start else "check",
            "stall_on": config.stall_on if rule.scores_start else "checks",
            "give_up": rule.give_up, "give_up_after": rule.give_up_after,
            "stop_share": rule.stop_share, "start_only": "on" if rule.start_only else "off",
            "start_scale": config.start_scale_of(rows)}


def load_checkpoint(path: str | None, config: LearnerConfig, data: Dataset,
                    device: torch.device) -> dict | None:
    """The saved state, or None (with a note) when there is none yet; a checkpoint of another
    configuration or other data is refused rather than silently continued. Temporary files a
    killed save left beside it are removed first."""
    if not path:
        raise UserError("--resume needs a checkpoint path (--checkpoint)")
    remove_temporaries(path)
    if not os.path.exists(path):
        print(f"datamask: no checkpoint at {path} yet; starting from step 0", file=sys.stderr)
        return None
    try:  # weights_only: tensors and plain containers, never arbitrary code from a pickle
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a truncated or foreign file: say which, do not guess
        raise UserError(f"{path}: not a datamask checkpoint ({quoted(err)})") from None
    if not isinstance(state, dict) or not set(CHECKPOINT_KEYS) <= set(state):
        raise UserError(f"{path}: not a datamask checkpoint (it holds a {type(state).__name__} "
                        f"without the learner's state)")
    # a setting added after the checkpoint was made ran as it did before the setting existed
    saved = resolved({**asdict(LearnerConfig()), **BEFORE_THEY_EXISTED, **state["config"]},
                     len(data))
    now = resolved(asdict(config), len(data))
    changed = sorted(key for key in now  # neither changes what the run computes
                     if key not in ("device", "certificate") and saved.get(key) != now[key])
    if changed:
        detail = ", ".join(f"--{key} {saved.get(key)} -> {now[key]}" for key in changed)
        raise UserError(f"{path}: checkpoint was made with other settings ({detail})")
    old, new = state["fingerprint"], fingerprint(data)
    if not isinstance(old, dict):
        raise UserError(f"{path}: checkpoint was made by an older datamask that did not "
                        f"fingerprint the features; delete it to start again")
    differ = [FINGERPRINT_WORDS[key] for key in new if old.get(key) != new[key]]
    if differ:
        raise UserError(f"{path}: checkpoint was made on other input data ({', '.join(differ)} "
                        f"differ)")
    if state["generator"].numel() != torch.Generator(device=device).get_state().numel():
        raise UserError(f"{path}: checkpoint was made on another device type than {device}")
    return state


def policy_gradient(logits: torch.Tensor, idx: torch.Tensor, advantages: torch.Tensor,
                    logprob: str = "simple") -> torch.Tensor:
    """(1/G) sum_j A_j grad log P(M_j | L).

    'simple': log P = sum of log-softmax over the selected rows, whose gradient is
    M_j - k softmax(L); the second part is multiplied by sum_j A_j = 0, so the gradient is
    (1/G) sum_j A_j M_j, a scatter-add. 'exact': autograd through the Plackett-Luce
    log-probability of the order in which Gumbel-top-k drew the rows.
    """
    n_masks, k = idx.shape
    if logprob == "exact":
        leaf = logits.detach().requires_grad_(True)
        log_prob = plackett_luce_log_prob(leaf, idx)
        return torch.autograd.grad((advantages * log_prob).sum() / n_masks, leaf)[0]
    weights = advantages.unsqueeze(1).expand(n_masks, k).reshape(-1)
    return torch.zeros_like(logits).index_add_(0, idx.reshape(-1), weights) / n_masks


@dataclass(frozen=True)
class Shape:
    """How many rows: all input rows and the budget over them, the candidates kept by quality
    pruning, and one step's rows and budget (`partial`: n_step random candidates, of which
    k_step are drawn, keeping the selected fraction k_total / len(pool))."""

    n_total: int
    k_total: int
    pool: np.ndarray
    n_step: int
    k_step: int
    n_cover: int  # rows Facility's coverage is measured on in a step (--cover_sample)

    @classmethod
    def of(cls, config: LearnerConfig, quality: np.ndarray) -> "Shape":
        n_total = len(quality)
        k_total = budget(config.select_ratio, n_total)
        if config.algorithm == "DiSF" and k_total < 2:
            raise UserError("--algorithm DiSF needs at least 2 selected rows")
        pool = candidate_rows(quality, config.prune_ratio, k_total)
        n_pool = len(pool)
        n_step, k_step = step_rows(config.partial, n_pool, k_total)
        if config.algorithm == "DiSF" and k_step < 2:
            raise UserError(
                f"--partial {config.partial} leaves {k_step} row per DiSF mask; raise it")
        n_cover = max(1, round(config.cover_sample * n_pool)) if config.cover_sample else n_pool
        return cls(n_total, k_total, pool, n_step, k_step, n_cover)


def step_rows(partial: float, n_pool: int, k_total: int) -> tuple[int, int]:
    """A step's rows of the `n_pool` candidates at `partial`, and how many of them its masks hold
    (the selected fraction kept, at least 1, fewer than the step's rows)."""
    n_step = n_pool if partial >= 1.0 else max(2, round(partial * n_pool))
    return n_step, max(1, min(n_step - 1, round(k_total * n_step / n_pool)))


def fitting_partial(config: LearnerConfig, quality: np.ndarray) -> float:
    """`config.partial`, or where its masks would hold fewer than 2 rows of this input (one row
    has no diversity: DiSF refuses it, Pair_simi has no pair), the smallest partial whose masks
    hold 2 (1, all rows, where none does): what `select` runs when --partial is not given."""
    k_total = budget(config.select_ratio, len(quality))
    n_pool = len(candidate_rows(quality, config.prune_ratio, k_total))
    if step_rows(config.partial, n_pool, k_total)[1] >= 2:
        return config.partial
    partial = math.ceil(1.5 * n_pool / max(1, k_total)) / n_pool  # k_step rounds 1.5 up to 2
    return partial if partial < 1 and step_rows(partial, n_pool, k_total)[1] >= 2 else 1.0


@dataclass(frozen=True)
class StepVariant:
    """How a step departs from the paper's (the defaults): `LearnerConfig`'s credit, its update
    (an `AdaptiveAscent` for --update adam, which keeps its moments across steps, else plain
    ascent), the probes a step uses (`LearnerConfig.step_probes`) and its log P(mask) form."""

    credit: str = "mask"
    update: AdaptiveAscent | None = None
    probes: int = 0
    logprob: str = "simple"


PAPER_STEP = StepVariant()


def policy_step(logits: torch.Tensor, ground: GroundSet, objective: Joint, shape: Shape,
                n_rollout: int, lr: float, gen: torch.Generator,
                variant: StepVariant = PAPER_STEP) -> torch.Tensor:
    """One step of DATAMASK, in place on `logits`; returns the objective of its G masks.
    `variant` and `shape.n_cover` are the variants of `LearnerConfig` (credit, update, probes,
    logprob, cover_sample); the default is the paper's step."""
    credit, update, probes, logprob = (variant.credit, variant.update, variant.probes,
                                       variant.logprob)
    rows, step_ground, step_logits = None, ground, logits
    if shape.n_step < len(ground):  # `partial`: the step works on n_step random candidates
        rows = torch.randperm(len(ground), generator=gen, device=logits.device)[:shape.n_step]
        step_ground, step_logits = ground.subset(rows), logits[rows]
    dim = step_ground.features.shape[1]
    objective = step_objective(
        objective, shape, dim, probes,
        cover=lambda: torch.randperm(shape.n_step, generator=gen, device=logits.device),
        directions=lambda: random_probes(dim, probes, gen, logits.device))
    idx = gumbel_topk(step_logits, shape.k_step, n_rollout, gen,  # (G, k_step): G masks
                      ordered=logprob == "exact")
    if credit == "row":
        scores, contributions = objective.batch_with_credit(step_ground, idx)  # (G,), (G, k)
        advantages = standardised(contributions)
        grad = torch.zeros_like(step_logits).index_add_(
            0, idx.reshape(-1), advantages.reshape(-1)) / len(idx)
    else:
        scores = objective.batch(step_ground, idx)  # (G,)
        grad = policy_gradient(step_logits, idx, standardised(scores), logprob)
    if update is not None:
        update.apply(logits, rows, grad, lr)
    elif rows is None:  # logit ascent
        logits.add_(grad, alpha=lr)
    else:
        logits.index_add_(0, rows, grad, alpha=lr)
    return scores


def step_objective(objective: Joint, shape: Shape, dim: int, probes: int,
                   cover: Callable[[], torch.Tensor],
                   directions: Callable[[], torch.Tensor]) -> Joint:
    """The objective a step scores its masks on: with `cover_sample`, Facility's coverage on the
    first n_cover rows of `cover()` (a permutation of the step's rows); with `probes`, where they
    save work, DiSF's score estimated along `directions()` (dim, probes), drawn afresh each
    step. The draws are made in that order, and only where used."""
    if shape.n_cover < shape.n_step:
        objective = objective.with_diversity(
            objective.diversity.covering(cover()[:shape.n_cover]))
    if probing_saves_work(probes, shape.k_step, dim):
        objective = objective.with_diversity(objective.diversity.probing(directions()))
    return objective


def cost_line(cfg: LearnerConfig, shape: Shape, objective: Joint, ground: GroundSet,
              timed: tuple[float, int]) -> str:
    """The line a run prints after its first step: its shape, its objective's arithmetic a step
    (`SetFunction.batch_flops` of the objective the step scores, as `step_objective` makes it)
    and, from `timed` (that step's seconds, the steps done), what the steps left would take."""
    first_s, done = timed
    dim = ground.features.shape[1]
    scored = step_objective(objective, shape, dim, cfg.step_probes(),
                            cover=lambda: torch.arange(shape.n_step),
                            directions=lambda: torch.empty(dim, cfg.step_probes()))
    flops = scored.batch_flops(shape.n_step, dim, cfg.n_rollout, shape.k_step)
    left = cfg.n_epochs - done
    rule = " (the stopping rule may end it sooner)" if cfg.stop_every or cfg.patience else ""
    return (f"datamask {cfg.algorithm}: {shape.n_total:,} rows, {len(shape.pool):,} candidates, "
            f"{dim}-d; a step scores {cfg.n_rollout} masks of {shape.k_step:,} of "
            f"{shape.n_step:,} rows: {flop_count(flops)} of objective; step {done - 1} took "
            f"{first_s:.3g} s, so the {left:,} steps left would take about "
            f"{duration(left * first_s)} on {ground.device}{rule}")


def flop_count(flops: float) -> str:
    """FLOPs with the SI prefix that leaves 1 to 999 of them (to three figures)."""
    scaled, prefix = float(flops), ""
    for prefix in ("", "k", "M", "G", "T", "P"):
        if abs(scaled) < 999.5 or prefix == "P":
            break
        scaled /= 1000
    return f"{scaled:.3g} {prefix}FLOP"


def duration(seconds: float) -> str:
    """Seconds as a person reads them: s under 2 minutes, min under 2 hours, else h."""
    if seconds < 120:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.2g} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def standardised(values: torch.Tensor) -> torch.Tensor:
    """The group's advantages: values minus their mean, over their population std (+ 1e-8)."""
    return (values - values.mean()) / (values.std(unbiased=False) + 1e-8)


class AdaptiveAscent:
    """`--update adam`: Adam (Kingma & Ba, 2015) ascending the logits. Each logit keeps its own
    moments and count, updated only on the steps that move it (a `partial` step moves only its
    rows), so each is bias-corrected by its own count."""

    BETA1, BETA2, EPS = 0.9, 0.999, 1e-8

    def __init__(self, logits: torch.Tensor, state: dict | None = None):
        fresh = {name: torch.zeros_like(logits) for name in ("moment", "second", "count")}
        self.state = {name: value.to(logits.device) for name, value in (state or fresh).items()}

    def apply(self, logits: torch.Tensor, rows: torch.Tensor | None, grad: torch.Tensor,
              lr: float) -> None:
        if rows is None:
            rows = torch.arange(len(logits), device=logits.device)
        moment, second, count = (self.state[name] for name in ("moment", "second", "count"))
        moment[rows] = self.BETA1 * moment[rows] + (1 - self.BETA1) * grad
        second[rows] = self.BETA2 * second[rows] + (1 - self.BETA2) * grad.square()
        count[rows] += 1
        mean = moment[rows] / (1 - self.BETA1 ** count[rows])
        spread = (second[rows] / (1 - self.BETA2 ** count[rows])).sqrt_().add_(self.EPS)
        logits.index_add_(0, rows, mean / spread, alpha=lr)


def plateaued(recent: list[float], window: int, min_gain: float, first: float) -> bool:
    """The stopping rule (--patience, --min_gain): the mean step objective of the last `window`
    steps (the end of `recent`) rose by less than `min_gain` of its rise since the first step
    (`first`) over the `window` steps before. The step objective (the mean over a step's G
    masks) is computed anyway, so watching it costs nothing; the window averages out the noise
    of each step's random rows and masks. A run that has not risen at all is not stopped: it has
    not started to learn."""
    if not window or len(recent) < 2 * window:
        return False
    last = sum(recent[-window:]) / window
    before = sum(recent[-2 * window:-window]) / window
    rise = last - first
    return rise > 0 and last - before < min_gain * rise


def stalled(bests: list[float], window: int, tolerance: float) -> bool:
    """The stopping rule (--stop_window, --stop_tolerance) on the best read-off objective after
    each check so far: over the last `window` checks the best rose by at most `tolerance` of its
    rise since the first check. Relative to that rise, not to the value, because the joint's zero
    is where random masks of a step's shape score, not the written selection's shape."""
    if len(bests) <= window:
        return False
    return bests[-1] - bests[-1 - window] <= tolerance * (bests[-1] - bests[0])


def selection_value(objective: Joint, ground: GroundSet, rows: torch.Tensor) -> torch.Tensor:
    """The joint objective of one selection (`rows` of the ground set) on all of the ground set.
    Facility's coverage is summed over blocks of covered rows, each block's k x rows similarities
    within the metric's memory budget (not the CPU chunk cap: each block gathers the k selected
    rows again, so larger blocks pay that less often), so a 1M-row candidate set never needs its
    k x N block at once. Its cost, N k d, is about one learner step's, G partial^2 N k d."""
    metric, n = objective.diversity, len(ground)
    mask = rows.unsqueeze(0)
    if not isinstance(metric, FacilityLocation) or metric.memory_bytes >= 4 * len(rows) * n:
        return objective.batch(ground, mask)[0]
    covers = torch.arange(n, device=ground.device).split(max(1, metric.memory_bytes
                                                             // (4 * len(rows))))
    covered = torch.stack([metric.covering(cover).batch(ground, mask)[0] * len(cover)
                           for cover in covers]).sum() / n
    return objective.combine(Quality()(ground, rows), covered)


def read_off_rows(logits: torch.Tensor, quality: torch.Tensor, k: int, gen: torch.Generator,
                  how: str) -> np.ndarray:
    """The k rows of the ground set a read-off picks: the top-k logits, or one Gumbel-top-k
    draw from the policy."""
    if how == "sample":
        return gumbel_topk(logits, k, 1, gen)[0].cpu().numpy()
    return top_rows(logits.cpu().numpy(), quality.cpu().numpy(), k)


def read_off(logits: torch.Tensor, quality: torch.Tensor, shape: Shape, gen: torch.Generator,
             how: str) -> np.ndarray:
    """The selection (N,) bool of a read-off (`read_off_rows`)."""
    return selection_of(shape, read_off_rows(logits, quality, shape.k_total, gen, how))


def selection_of(shape: Shape, rows: np.ndarray) -> np.ndarray:
    """(N,) bool: True at the input rows that candidates `rows` are."""
    selected = np.zeros(shape.n_total, dtype=bool)
    selected[shape.pool[rows]] = True
    return selected


def forked(gen: torch.Generator) -> torch.Generator:
    """A generator in `gen`'s state: a draw from it leaves the run's own stream untouched."""
    fork = torch.Generator(device=gen.device)
    fork.set_state(gen.get_state())
    return fork


STOP_WORDS = {"steps": "all steps", "stopping_rule": "stopped by the stopping rule",
              "patience": "stopped by --patience",
              "certificate": "stopped by the start's certificate, --stop_share",
              "start_only": "the start alone, --start_only"}


def closing_line(cfg: LearnerConfig, result: LearnResult) -> str:
    """The line a run ends with: its steps, why it stopped, what it wrote and how good it is."""
    def value(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.4f}"

    def share(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    written, bound = result.written_step, result.certificate.get("objective_bound")
    return (f"datamask {cfg.algorithm}: {result.steps_taken} of {cfg.n_epochs} steps "
            f"({STOP_WORDS[result.stop_reason]}); wrote step {written}"
            f"{' (the start)' if written == 0 else ''}: objective "
            f"{value(result.objective_written)}, start {value(result.objective_start)}; "
            + ("no bound" if bound is None and cfg.certificate == "on" else
               "certificate off" if bound is None else
               f"bound {value(bound)}, share above random: written "
               f"{share(result.certificate['share_above_random_written'])}, start "
               f"{share(result.certificate['share_above_random_start'])}"))


@dataclass
class Progress:
    """What a run has reached: the state a checkpoint holds besides settings and generator."""

    logits: torch.Tensor
    scale: TermScale
    step: int = 0
    elapsed_s: float = 0.0
    history: list[dict] = field(default_factory=list)
    adam: dict | None = None  # AdaptiveAscent's moments (--update adam)
    best: dict | None = None  # the stopping rule's best check: step, objective, logits, rows
    start_objective: float | None = None  # the start's read-off on the joint objective
    start_rows: torch.Tensor | None = None  # its rows (candidates), for its certificate
    check_scale: TermScale | None = None  # --start_scale input, sampled: the checks' scale
    start_s: float | None = None  # the start's time (greedy and scoring), for --give_up_after
    settled: bool = False  # the run ends before a step (--start_only, or --stop_share's certificate)

    def keep_if_best(self, rows: np.ndarray, value: float) -> None:
        """Keep the read-off `rows` (objective `value`), with the logits now, if it is the best."""
        if self.best is None or value > self.best["objective"]:
            self.best = {"step": self.step, "objective": value, "rows": torch.as_tensor(rows),
                         "logits": self.logits.clone()}


@dataclass(frozen=True)
class StoppingRule:
    """When a run stops, and why: every stopping setting of `LearnerConfig`, auto resolved once
    for one input's row count (`of`), so that this is the one place that says it. After each step
    the loop asks `check_due` (score the read-off now?), then `stops_at_check` and `plateaued`;
    `reason` names the stop."""

    n_epochs: int  # the cap
    every: int  # --stop_every: a check every this many steps and at the cap; 0 = no check
    window: int  # --stop_window, in checks
    tolerance: float  # --stop_tolerance: of the best's rise (the stall), of the start's value
    watched: str  # the check record's key the stall is tested on (--stall_on)
    scores_start: bool  # --best_from: the start is scored first, the best for the checks to beat
    give_up: int  # --give_up: stop once this many checks have not beaten the start; 0 = never
    give_up_after: float  # --give_up_after: the budget after the start, in its times; 0 = none
    grace: float  # --give_up_grace, seconds added to that budget
    budget_every_step: bool  # --budget_check step: the budget read after every step
    stop_share: float  # --stop_share: the start's certificate share that ends the run; 0 = off
    start_only: bool  # --start_only: the start is written with no step
    patience: int  # --patience, in steps; 0 = off
    min_gain: float  # --min_gain

    @classmethod
    def of(cls, cfg: LearnerConfig, rows: int) -> "StoppingRule":
        """The rule of a run of `cfg` on `rows` input rows; the start's rules only where it is
        scored."""
        scored = cfg.scores_start(rows)
        return cls(cfg.n_epochs, cfg.stop_every, cfg.stop_window, cfg.stop_tolerance,
                   "best_objective" if cfg.stall_on == "best" else "readoff_objective", scored,
                   give_up=cfg.give_up_of(rows) if scored else 0,
                   give_up_after=cfg.give_up_after_of() if scored else 0.0,
                   grace=cfg.give_up_grace, budget_every_step=cfg.budget_check == "step",
                   stop_share=cfg.stop_share_of(rows) if scored else 0.0,
                   start_only=cfg.start_only_of(rows),
                   patience=cfg.patience, min_gain=cfg.min_gain)

    def settles(self, share: float | None) -> bool:
        """Whether the start's certificate `share` ends the run before its first step."""
        return bool(self.stop_share) and share is not None and share >= self.stop_share

    def check_due(self, run: Progress, elapsed_s: float) -> bool:
        """Whether the step `run` has just taken is followed by a check: every `every` steps, at
        the cap, and (--budget_check step) at a step that ends past the time budget."""
        if not self.every:
            return False
        return (run.step % self.every == 0 or run.step == self.n_epochs
                or self.budget_every_step and self.past_budget(run, elapsed_s))

    def stops_at_check(self, run: Progress, elapsed_s: float) -> bool:
        """Whether the run stops at the check it has just recorded: the start unbeaten after
        `give_up` checks, the time budget spent (`past_budget`), or the watched best `stalled`."""
        bests = list(accumulate((r[self.watched] for r in run.history if self.watched in r), max))
        unbeaten = run.best["step"] == 0 and len(bests) >= self.give_up > 0
        return (unbeaten or self.past_budget(run, elapsed_s)
                or stalled(bests, self.window, self.tolerance))

    def past_budget(self, run: Progress, elapsed_s: float) -> bool:
        """--give_up_after: the time since the start is past its budget, and no check has beaten
        the start by more than `tolerance` of its objective."""
        if not (self.give_up_after and run.start_s is not None):
            return False
        budget = self.give_up_after * run.start_s + self.grace
        margin = self.tolerance * abs(run.start_objective)
        return (elapsed_s - run.start_s > budget
                and run.best["objective"] <= run.start_objective + margin)

    def plateaued(self, run: Progress) -> bool:
        """--patience: the steps' mean objective has plateaued (`plateaued`)."""
        return bool(self.patience) and plateaued(
            [r["objective_mean"] for r in run.history[-2 * self.patience:]], self.patience,
            self.min_gain, first=run.history[0]["objective_mean"])

    def reason(self, run: Progress) -> str:
        """Why a run that has ended stopped: its start alone asked for, its start's
        certificate, the cap, or a rule."""
        if self.start_only:
            return "start_only"
        if run.settled:
            return "certificate"
        if len(run.history) == self.n_epochs:
            return "steps"
        return "stopping_rule" if self.every else "patience"


@dataclass(frozen=True)
class Checks:
    """How the start and the stopping rule's checks score a read-off: on the joint objective
    of full-budget selections (`scoring`, --start_scale's) over all candidates."""

    scoring: Joint
    ground: GroundSet
    k: int  # the budget over the candidates
    readoff: str  # --readoff

    def value(self, rows: np.ndarray) -> float:
        """The joint objective of candidate `rows` over all candidates."""
        return selection_value(self.scoring, self.ground,
                               torch.as_tensor(rows, device=self.ground.device)).item()

    def read_off(self, run: Progress, gen: torch.Generator) -> tuple[np.ndarray, float]:
        """The rows the run would write now, and their objective."""
        rows = read_off_rows(run.logits, self.ground.quality, self.k, gen, self.readoff)
        return rows, self.value(rows)

    def check(self, run: Progress, record: dict, gen: torch.Generator) -> None:
        """Score the read-off, keep it if best, and note both in the step's `record`."""
        rows, value = self.read_off(run, gen)
        run.keep_if_best(rows, value)
        record.update(readoff_objective=value, best_objective=run.best["objective"],
                      best_step=run.best["step"])


def save_progress(path: str, cfg: LearnerConfig, data: Dataset, run: Progress,
                  gen: torch.Generator, update: AdaptiveAscent | None) -> None:
    """The checkpoint of a run: its settings, the data's fingerprint, and all it has reached."""
    best = run.best and {**run.best, "logits": run.best["logits"].cpu()}
    save_checkpoint(path, {
        "config": asdict(cfg), "fingerprint": fingerprint(data), "step": run.step,
        "logits": run.logits.cpu(), "generator": gen.get_state(), "scale": asdict(run.scale),
        "elapsed_s": run.elapsed_s, "history": run.history,
        "variants": {"adam": None if update is None else update.state}, "best": best,
        "start_objective": run.start_objective, "start_rows": run.start_rows,
        "check_scale": run.check_scale and asdict(run.check_scale), "start_s": run.start_s,
        "settled": run.settled})


class MaskLearner:
    """Learns a selection mask for one block of rows (the paper runs blocks independently)."""

    def __init__(self, config: LearnerConfig):
        config.validate()
        self.config = config

    def fit(self, data: Dataset, evaluate: Callable[[np.ndarray], dict] | None = None,
            eval_every: int = 0, log_path: str | None = None, progress: bool = True,
            checkpoint_path: str | None = None, checkpoint_every: int = 0,
            resume: bool = False) -> LearnResult:
        """Run `policy_step` up to n_epochs times, then read the selection off the logits.

        When the run stops is its `StoppingRule`'s to say. With the stopping rule (--stop_every
        m), every m steps and at the last step the read-off is scored on the run's joint
        objective over all candidates (`Checks`, timed with the steps), the best kept with its
        logits; the run stops once `stalled` (tested on the checks' own best, or with --stall_on
        best on that best), and the best is the selection and its logits the scores. With
        --best_from start (or auto on a greedy start) the starting read-off is scored first, the
        best for the checks to beat, and with --give_up (checks) or --give_up_after (time) a run
        whose checks do not beat it stops early, and with --stop_share a start whose certificate
        reaches it is written with no step. With --start_scale input (or sampled) the start and
        the checks score on the joint objective scaled as the report scales it (or from its
        first masks), the steps on their own. A run reports what it did
        (`LearnResult.summary`): where no check scored the start or the written read-off, each
        is scored once on the same objective, outside the timed part.

        `evaluate(selected_mask) -> dict` is called every `eval_every` steps on the current
        read-off (for curves); its time is excluded from the reported time. With
        `checkpoint_path`, the whole state (logits, step, generator, scale, history) is saved there
        atomically every `checkpoint_every` steps and at the end; `resume` continues from it, and
        gives exactly the selection of an uninterrupted run with the same seed on the same device.
        """
        cfg = self.config
        device = resolve_device(cfg.device)
        gen = torch.Generator(device=device)
        gen.manual_seed(cfg.seed)
        shape = Shape.of(cfg, data.quality)
        if cfg.start_init(shape.n_total) == "knn":  # refused before any work, with the pip line
            require_installed("faiss", "Facility's kNN start (--init knn)")
        pruned = len(shape.pool) < shape.n_total  # else share the input's memory, no copy
        ground = GroundSet.from_arrays(data.features[shape.pool] if pruned else data.features,
                                       data.quality[shape.pool] if pruned else data.quality, device)
        metric = diversity(cfg.algorithm)
        state = load_checkpoint(checkpoint_path, cfg, data, device) if resume else None
        run = self._start(state, ground, shape, metric, gen)
        objective = Joint(metric, cfg.lamb, run.scale)  # exact: a step swaps in its estimates
        checks = Checks(Joint(metric, cfg.lamb, run.check_scale or run.scale), ground,
                        shape.k_total, cfg.readoff)
        rule = StoppingRule.of(cfg, shape.n_total)
        update = AdaptiveAscent(run.logits, run.adam) if cfg.update == "adam" else None
        variant = StepVariant(cfg.credit, update, cfg.step_probes(), cfg.logprob)
        known = {} if state is not None else self._score_start(run, checks, rule, gen)
        with ExitStack() as stack:
            log_file = stack.enter_context(open(log_path, "w")) if log_path else None
            if log_file:  # a resumed run rewrites the steps it keeps, so the log has each step once
                log_file.writelines(json.dumps(record) + "\n" for record in run.history)
            bar = stack.enter_context(tqdm(
                range(run.step, run.step if run.settled else cfg.n_epochs),
                desc=f"datamask {cfg.algorithm}",
                disable=not progress, mininterval=0.5, initial=run.step, total=cfg.n_epochs))
            for step in bar:
                began = time.perf_counter()
                lr = learning_rate(cfg.lr_schedule, step, cfg.n_epochs, cfg.max_lr, cfg.min_lr)
                scores = policy_step(run.logits, ground, objective, shape, cfg.n_rollout, lr, gen,
                                     variant)
                stats = torch.stack([scores.mean(), scores.max()]).tolist()  # one device sync
                run.step = step + 1
                record = {"step": step, "lr": lr, "objective_mean": stats[0],
                          "objective_max": stats[1]}
                run.history.append(record)
                stop = False
                elapsed = run.elapsed_s + time.perf_counter() - began
                if rule.check_due(run, elapsed):
                    checks.check(run, record, gen)
                    stop = rule.stops_at_check(run, elapsed)
                run.elapsed_s += time.perf_counter() - began
                record["elapsed_s"] = run.elapsed_s
                if progress and step == bar.initial:  # what the steps asked for will cost
                    tqdm.write(cost_line(cfg, shape, objective, ground, (
                        time.perf_counter() - began, run.step)), file=sys.stderr)
                if rule.plateaued(run):
                    stop = True
                if evaluate is not None and eval_every and (
                        step % eval_every == 0 or step == cfg.n_epochs - 1 or stop):
                    record.update(evaluate(read_off(run.logits, ground.quality, shape, gen,
                                                    "topk")))
                if log_file:
                    log_file.write(json.dumps(record) + "\n")
                bar.set_postfix(objective=f"{stats[0]:.3f}", lr=f"{lr:.2g}", refresh=False)
                if checkpoint_path and checkpoint_every and run.step % checkpoint_every == 0:
                    save_progress(checkpoint_path, cfg, data, run, gen, update)
                if stop:
                    break
        if checkpoint_path:
            run.step = cfg.n_epochs  # a stopped run is complete: resuming it runs no step
            save_progress(checkpoint_path, cfg, data, run, gen, update)
        result = self._result(run, checks, rule, shape, known, gen)
        if progress:
            print(closing_line(cfg, result), file=sys.stderr)
        return result

    def _score_start(self, run: Progress, checks: Checks, rule: StoppingRule,
                     gen: torch.Generator) -> dict:
        """A fresh run's start, scored: where the rule scores it (timed), the best for the checks
        to beat, and its certificate where --stop_share reads it (returned, by name); else for
        the summary alone (untimed, its read-off drawn from a fork of the generator)."""
        if rule.start_only:  # written as it is: scored for the summary, untimed
            rows, run.start_objective = checks.read_off(run, gen)
            run.keep_if_best(rows, run.start_objective)
            run.start_rows, run.settled = run.best["rows"], True
            return {}
        if not rule.scores_start:
            rows, run.start_objective = checks.read_off(run, forked(gen))
            run.start_rows = torch.as_tensor(rows)
            return {}
        began = time.perf_counter()
        rows, run.start_objective = checks.read_off(run, gen)  # not a check: no stall counts it
        run.keep_if_best(rows, run.start_objective)
        run.start_rows = run.best["rows"]
        known = {}
        if rule.stop_share:  # timed: the stop reads it
            known["start"] = certificate(checks.scoring, checks.ground, run.start_rows)
            run.settled = rule.settles(known["start"].share_above_random())
        run.elapsed_s += time.perf_counter() - began
        run.start_s = run.elapsed_s
        return known

    def _result(self, run: Progress, checks: Checks, rule: StoppingRule, shape: Shape,
                known: dict, gen: torch.Generator) -> LearnResult:
        """What a run that has ended writes: the best check's read-off and its logits (else the
        last read-off and logits), why it stopped, and (untimed) the objectives and
        certificates of its start and written selection."""
        cfg = self.config
        began = time.perf_counter()
        if run.best is None:
            logits = run.logits
            rows = read_off_rows(run.logits, checks.ground.quality, shape.k_total, gen,
                                 cfg.readoff)
        else:  # the stopping rule's best read-off, and the logits it was read off
            logits = run.best["logits"]
            rows = run.best["rows"].numpy()
        run.elapsed_s += time.perf_counter() - began
        full_logits = np.full(shape.n_total, -np.inf, dtype=np.float32)
        full_logits[shape.pool] = logits.cpu().numpy()
        written = checks.value(rows) if run.best is None else run.best["objective"]  # untimed
        # how near the optimum start and written selection are: untimed, on the same objective
        if cfg.certificate == "on":
            certificates = certify(checks.scoring, checks.ground, {
                "start": run.start_rows, "written": torch.as_tensor(rows)}, known)
        else:  # none computed for it: only the start's, where --stop_share read it
            certificates = {**known, **({"written": known["start"]}
                                          if run.settled and "start" in known else {})}
        certified = certificate_fields(certificates, ["start", "written"])
        if not certificates:
            certified["no_bound_reason"] = "not computed: --certificate off"
        return LearnResult(
            selection_of(shape, rows), full_logits, run.history, run.elapsed_s, len(run.history),
            best_step=None if run.best is None else run.best["step"],
            stop_reason=rule.reason(run), objective_start=run.start_objective,
            objective_written=written, certificate=certified)

    def _start(self, state: dict | None, ground: GroundSet, shape: Shape, metric: SetFunction,
               gen: torch.Generator) -> Progress:
        """A fresh run (term scale fitted, initial logits), or the checkpoint's, generator too."""
        cfg = self.config
        if state is not None:
            gen.set_state(state["generator"])
            variants = state.get("variants") or {}
            return Progress(state["logits"].to(ground.device), TermScale(**state["scale"]),
                            state["step"], state["elapsed_s"], state["history"],
                            variants.get("adam"), state.get("best"),
                            state.get("start_objective"), state.get("start_rows"),
                            state.get("check_scale") and TermScale(**state["check_scale"]),
                            state.get("start_s"), state.get("settled", False))
        if cfg.term_scale is not None:  # given: the run fits no scale of its own
            scale = TermScale(*cfg.term_scale)
        elif cfg.scale_on == "input":
            scale = TermScale.fit(ground, shape.k_total, metric, gen)
        elif shape.n_cover < len(ground):  # on a cover sample of a step's size, as it scores
            cover = torch.randperm(len(ground), generator=gen, device=ground.device)
            scale = TermScale.fit(ground, shape.k_step, metric.covering(cover[:shape.n_cover]),
                                  gen)
        else:
            scale = TermScale.fit(ground, shape.k_step, metric, gen,
                                  subset_size=None if shape.n_step == len(ground) else shape.n_step)
        start = time.perf_counter()
        check_scale, start_scale = None, cfg.start_scale_of(shape.n_total)
        if start_scale != "step" and cfg.term_scale is None:  # the report's, or its estimate
            check_scale = TermScale.scored(ground, shape.k_total, metric, cfg.seed,
                                           n_grounds=1 if start_scale == "sampled" else
                                           SCALE_GROUNDS)
        init = cfg.start_init(shape.n_total)
        if init == "knn":
            return Progress(knn_greedy_logits(ground, shape.k_total, cfg.seed), scale,
                            elapsed_s=time.perf_counter() - start, check_scale=check_scale)
        if init != "greedy":
            return Progress(initial_logits(ground.quality, init), scale, check_scale=check_scale,
                            elapsed_s=time.perf_counter() - start)
        logits = greedy_logits(ground, Joint(metric, cfg.lamb, check_scale or scale),
                               cfg.algorithm, shape.k_total, gen,
                               cfg.start_optimizer_of(shape.n_total), cfg.start_rounds)
        return Progress(logits, scale, elapsed_s=time.perf_counter() - start,
                        check_scale=check_scale)

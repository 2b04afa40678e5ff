"""What the greedy baselines share: the ground set on a device, common options and checks, and
the output.

A greedy's per-row score is its pick order (the first pick scores k, the last 1, unpicked rows 0),
so that the top-k of the score is the selection and the order in which it was built is kept.
"""

from __future__ import annotations

import numpy as np
import torch

from datamask.data import Dataset
from datamask.errors import UserError
from datamask.greedy import BATCHED_ROUNDS, STOCHASTIC_EPSILON, Optimizer
from datamask.objectives import GroundSet
from datamask.options import Range, option
from datamask.shared import resolve_device


def device_option():
    """The --device field of a selector's options (a fresh field per class)."""
    return option("auto", "cpu, cuda, cuda:N or auto (CUDA when available)")


def seed_option():
    """The --seed field of a greedy's options: its random first pick, partition or samples."""
    return option(0, "seed of the random first pick, GreeDi's partition and the stochastic "
                     "greedy's samples")


def epsilon_option():
    """The --epsilon field of a greedy that offers the stochastic optimiser."""
    return option(STOCHASTIC_EPSILON, "stochastic optimiser: each step scores a random "
                  "(N / k) ln(1 / epsilon) of the remaining rows, within 1 - 1/e - epsilon",
                  within=Range(0.0, 1.0, open_low=True, open_high=True))


def rounds_option():
    """The --rounds field of a greedy that offers the batched optimiser."""
    return option(BATCHED_ROUNDS, "batched optimiser: this many rounds, each taking the best "
                  "ceil(k / rounds) rows of one full pass at once", within=Range(1))


def optimiser_of(options, device: torch.device) -> Optimizer:
    """The `datamask.greedy.Optimizer` of a greedy's --optimizer, --epsilon, --rounds and
    --seed (the samples' generator, on the ground set's device)."""
    generator = torch.Generator(device=device)
    generator.manual_seed(options.seed)
    return Optimizer(options.optimizer, options.epsilon, generator, options.rounds)


def ground_set(data: Dataset, device: str) -> GroundSet:
    return GroundSet.from_arrays(data.features, data.quality, resolve_device(device))


def check(ok: bool, message: str) -> None:
    """Refuse a bad option with a UserError whose message names the flag."""
    if not ok:
        raise UserError(message)


def picks_output(n: int, picks) -> tuple[np.ndarray, np.ndarray]:
    """(selected mask, score) of an ordered list of picked rows."""
    picks = torch.as_tensor(picks).cpu().numpy()
    selected = np.zeros(n, dtype=bool)
    selected[picks] = True
    score = np.zeros(n, dtype=np.float32)
    score[picks] = np.arange(len(picks), 0, -1)
    return selected, score


def first_picks(sizes, seed: int) -> np.ndarray:
    """One uniformly random row per block of the given sizes, seeded: the start of greedies whose
    objective ties on every single row (DiSF's reference greedy starts each batch this way)."""
    return np.random.default_rng(seed).integers(0, np.asarray(sizes, dtype=np.int64))

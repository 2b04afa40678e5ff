"""`facility-greedy`: greedy facility location on the clipped-cosine similarity.

f(S) = sum_v max_{u in S} sim(v, u) with sim = `datamask.objectives.clipped_cosine` (the Facility
metric times |V|) is monotone submodular, so greedy is within 1 - 1/e of the optimum. Two exact
optimisers of `datamask.greedy` give the same picks (ties to the lowest row), a third trades
exactness for speed:
- naive: every step scores the gain of every candidate, O(N^2) per step on the N x N kernel;
- lazy (Minoux 1978): gains only shrink as S grows, so a stale gain bounds the fresh one; each step
  refreshes the candidates with the largest bounds, a block at a time as one vectorised op, until
  the best bound is a fresh gain;
- stochastic (Mirzasoleiman et al., AAAI 2015): each step scores a seeded random sample of
  (N / k) ln(1 / epsilon) remaining rows, within 1 - 1/e - epsilon in expectation.
When the N x N float32 kernel exceeds `memory_gb`, it runs GreeDi (Mirzasoleiman et al., NeurIPS
2013): a seeded random partition into parts whose kernels fit, a greedy of k rows inside each part
(covering that part), a greedy of k rows among the union of those picks (covering all rows, or a
seeded random sample of them when that kernel would not fit either), and the best of these
solutions by the Facility objective on all rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from datamask.data import Dataset
from datamask.greedy import OPTIMIZERS, Optimizer, greedy
from datamask.objectives import (CoverageGains, FacilityLocation, GroundSet, clipped_cosine,
                                 kernel_rows)
from datamask.objectives.facility import Rows
from datamask.options import Range, option
from datamask.selectors import Selector

from .common import (check, device_option, epsilon_option, ground_set, optimiser_of,
                     picks_output, rounds_option, seed_option)


def facility_greedy(rows: Rows, n_cand: int, n_cover: int, k: int,
                    optimizer: Optimizer | str = "lazy", device: torch.device | str = "cpu"
                    ) -> tuple[list[int], list[dict]]:
    """Greedy picks of k of n_cand candidates maximising the coverage of n_cover rows, whose
    similarities to candidates idx are `rows(idx)` (`datamask.objectives.CoverageGains`)."""
    term = CoverageGains(rows, n_cand, n_cover, device)
    return greedy(term, k, optimizer=optimizer, score=term.coverage_with, single_thread=True,
                  record=lambda s: {"step": s.step, "row": s.row,
                                    "facility": term.covered / n_cover,
                                    "gains_evaluated": s.gains_evaluated,
                                    "elapsed_s": s.elapsed_s})


def kernel_greedy(unit_cand: torch.Tensor, unit_cover: torch.Tensor, k: int,
                  optimizer: Optimizer) -> tuple[list[int], list[dict]]:
    """facility_greedy on the precomputed (candidates x covered) clipped-cosine kernel."""
    return facility_greedy(kernel_rows(clipped_cosine(unit_cand, unit_cover)), len(unit_cand),
                           len(unit_cover), k, optimizer, device=unit_cand.device)


def greedi(ground: GroundSet, k: int, optimizer: Optimizer,
           memory_bytes: int) -> tuple[torch.Tensor, list[dict]]:
    """GreeDi: partition, greedy per part, greedy over the union, best solution on all rows;
    the optimiser's generator draws the partition, the covered sample and the stochastic
    greedy's samples."""
    n, device, generator = len(ground), ground.device, optimizer.generator
    part_rows = math.isqrt(memory_bytes // 4)
    check(part_rows >= 2, f"--memory_gb {memory_bytes / 2**30:g} holds no 2 x 2 kernel")
    parts = torch.randperm(n, generator=generator, device=device).tensor_split(
        math.ceil(n / part_rows))
    local = [part[kernel_greedy(ground.unit[part], ground.unit[part], min(k, len(part)),
                                optimizer)[0]] for part in parts]
    union = torch.cat(local)
    cover_rows = min(n, memory_bytes // (4 * len(union)))
    check(cover_rows >= 1, f"--memory_gb {memory_bytes / 2**30:g} cannot hold the merge kernel "
                           f"of {len(union)} candidate rows")
    cover = torch.randperm(n, generator=generator, device=device)[:cover_rows]
    merged = union[kernel_greedy(ground.unit[union], ground.unit[cover], k, optimizer)[0]]
    solutions = [merged] + [picks for picks in local if len(picks) == k]
    values = FacilityLocation(memory_bytes).batch(ground, torch.stack(solutions))
    best = int(values.argmax())
    return solutions[best], [{
        "partitions": len(parts), "part_rows": part_rows, "merge_candidates": len(union),
        "merge_cover_rows": cover_rows, "facility_merged": values[0].item(),
        "facility_best_part": values[1:].max().item() if len(values) > 1 else None,
        "chosen": "merged" if best == 0 else f"local solution {best - 1}"}]


def optimizer_option():
    return option("lazy", "lazy (Minoux) or naive, same picks; or faster: stochastic, batched",
                  choices=OPTIMIZERS)


def memory_option(past: str):
    return option(8.0, f"largest N x N float32 kernel to hold (GB), else {past}",
                  within=Range(0.0, open_low=True))


@dataclass
class FacilityGreedyOptions:
    optimizer: str = optimizer_option()
    epsilon: float = epsilon_option()
    rounds: int = rounds_option()
    memory_gb: float = memory_option("GreeDi partitions")
    seed: int = seed_option()
    device: str = device_option()


class FacilityGreedy(Selector):
    """Greedy facility location (clipped cosine), naive, lazy or stochastic; GreeDi past
    --memory_gb."""

    name = "facility-greedy"
    Options = FacilityGreedyOptions

    def _select(self, data: Dataset, k: int):
        ground = ground_set(data, self.options.device)
        memory_bytes = int(self.options.memory_gb * 2**30)
        optimizer = optimiser_of(self.options, ground.device)
        if 4 * len(ground) ** 2 <= memory_bytes:
            picks, history = kernel_greedy(ground.unit, ground.unit, k, optimizer)
        else:
            picks, history = greedi(ground, k, optimizer, memory_bytes)
        return (*picks_output(len(data), picks), history,
                (FacilityLocation(memory_bytes), ground))

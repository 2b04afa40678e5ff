"""`facility-greedy`: greedy facility location on the clipped-cosine similarity.

f(S) = sum_v max_{u in S} sim(v, u) with sim = `datamask.objectives.clipped_cosine` (the Facility
metric times |V|) is monotone submodular, so greedy is within 1 - 1/e of the optimum. Two exact
optimisers give the same picks (ties to the lowest row):
- naive: every step scores the gain of every candidate, O(N^2) per step on the N x N kernel;
- lazy (Minoux 1978): gains only shrink as S grows, so a stale gain bounds the fresh one; each step
  refreshes the candidates with the largest bounds, a block at a time as one vectorised op, until
  the best bound is a fresh gain.
When the N x N float32 kernel exceeds `memory_gb`, it runs GreeDi (Mirzasoleiman et al., NeurIPS
2013): a seeded random partition into parts whose kernels fit, a greedy of k rows inside each part
(covering that part), a greedy of k rows among the union of those picks (covering all rows, or a
seeded random sample of them when that kernel would not fit either), and the best of these
solutions by the Facility objective on all rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from datamask.data import Dataset
from datamask.objectives import FacilityLocation, GroundSet, clipped_cosine
from datamask.options import option
from datamask.selectors import Selector

from .common import check, device_option, ground_set, one_thread, picks_output, seed_option

CHUNK_BYTES = 64 * 2**20  # similarity rows scored at once by a full pass
LAZY_BLOCK = 32  # candidates refreshed at once by the lazy greedy
OPTIMIZERS = ("lazy", "naive")

# value(cover, picks): the objective of S + {x} for every candidate x, from its coverage
# sum_v max(cur_v, sim(v, x)) and S (the picks so far, in order); it must not decrease in `cover`
# (that keeps lazy bounds valid).
Value = Callable[[torch.Tensor, list], torch.Tensor]


def facility_greedy(rows: Callable[[torch.Tensor], torch.Tensor], n_cand: int, n_cover: int,
                    k: int, optimizer: str = "lazy", value: Value | None = None,
                    device: torch.device | str = "cpu") -> tuple[list[int], list[dict]]:
    """Greedy picks of k of n_cand candidates maximising `value` (default: the coverage itself).

    `rows(idx)` gives the (len(idx), n_cover) non-negative similarities of candidates idx to the
    rows being covered (a precomputed kernel's rows, or computed on demand), as a tensor that the
    caller may overwrite.
    """
    cur = torch.zeros(n_cover, device=device)  # max similarity of each covered row to S
    everyone = torch.arange(n_cand, device=device)
    taken = torch.zeros(n_cand, dtype=torch.bool, device=device)
    fresh = torch.ones(n_cand, dtype=torch.bool, device=device)
    value = value or (lambda cover, picks: cover)

    def gains(idx):
        return rows(idx).sub_(cur).clamp_min_(0).sum(dim=1)

    def all_gains():
        step = max(1, CHUNK_BYTES // (4 * n_cover))
        return torch.cat([gains(part) for part in everyone.split(step)])

    bound, covered = all_gains(), 0.0  # exact gains at S = {}; covered = sum_v cur_v
    picks, history, refreshed = [], [], n_cand
    with one_thread(torch.device(device)):  # small ops: see common.one_thread
        for step in range(k):
            if optimizer == "naive" and step:
                bound, refreshed = all_gains(), refreshed + n_cand
                fresh.fill_(True)
            while True:
                values = value(covered + bound.double(), picks).masked_fill_(taken, -torch.inf)
                best = int(values.argmax())
                if fresh[best]:
                    break
                top = values.masked_fill_(fresh, -torch.inf).topk(min(LAZY_BLOCK, n_cand)).indices
                bound[top] = gains(top)
                fresh[top] = True
                refreshed += len(top)
            picks.append(best)
            taken[best] = True
            covered += bound[best].item()
            torch.maximum(cur, rows(everyone[best:best + 1])[0], out=cur)
            fresh.fill_(False)
            history.append({"step": step, "row": best, "facility": covered / n_cover,
                            "gains_evaluated": refreshed})
    return picks, history


def kernel_rows(kernel: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """`rows` of a precomputed kernel, gathered into reused buffers (one per block size): the
    lazy greedy's hot path is this gather, and allocating it anew doubles its cost."""
    buffers: dict[int, torch.Tensor] = {}

    def rows(idx: torch.Tensor) -> torch.Tensor:
        if len(idx) not in buffers:
            buffers[len(idx)] = kernel.new_empty(len(idx), kernel.shape[1])
        return torch.index_select(kernel, 0, idx, out=buffers[len(idx)])

    return rows


def kernel_greedy(unit_cand: torch.Tensor, unit_cover: torch.Tensor, k: int, optimizer: str
                  ) -> tuple[list[int], list[dict]]:
    """facility_greedy on the precomputed (candidates x covered) clipped-cosine kernel."""
    return facility_greedy(kernel_rows(clipped_cosine(unit_cand, unit_cover)), len(unit_cand),
                           len(unit_cover), k, optimizer, device=unit_cand.device)


def greedi(ground: GroundSet, k: int, optimizer: str, memory_bytes: int,
           generator: torch.Generator) -> tuple[torch.Tensor, list[dict]]:
    """GreeDi: partition, greedy per part, greedy over the union, best solution on all rows."""
    n, device = len(ground), ground.device
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
    return option("lazy", "lazy (Minoux) or naive greedy, same picks", choices=OPTIMIZERS)


def memory_option(past: str):
    return option(8.0, f"largest N x N float32 kernel to hold (GB), else {past}", low=0.0,
                  open_low=True)


@dataclass
class FacilityGreedyOptions:
    optimizer: str = optimizer_option()
    memory_gb: float = memory_option("GreeDi partitions")
    seed: int = seed_option()
    device: str = device_option()


class FacilityGreedy(Selector):
    """Greedy facility location (clipped cosine), naive or lazy; GreeDi past --memory_gb."""

    name = "facility-greedy"
    Options = FacilityGreedyOptions

    def _select(self, data: Dataset, k: int):
        p = self.options
        ground = ground_set(data, p.device)
        memory_bytes = int(p.memory_gb * 2**30)
        if 4 * len(ground) ** 2 <= memory_bytes:
            picks, history = kernel_greedy(ground.unit, ground.unit, k, p.optimizer)
        else:
            generator = torch.Generator(device=ground.device)
            generator.manual_seed(p.seed)
            picks, history = greedi(ground, k, p.optimizer, memory_bytes, generator)
        return (*picks_output(len(data), picks), history)

"""Facility location (`Facility`): how well the selection covers the ground set.

f(S) = (1/|V|) sum_{v in V} max_{u in S} max(cos(v, u), 0), with V the whole ground set (the
current block or `partial` subset). Clipping the cosine at 0 keeps the similarity non-negative,
which makes f monotone submodular (greedy is within 1 - 1/e). The similarities are computed per
chunk of masks as one batched GEMM (k x d times d x V), or gathered from an n x V kernel when many
masks share rows and that kernel fits the memory budget, so memory stays bounded for any n.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import Callable

import torch

from .base import GroundSet, SetFunction, chunk_bytes, mask_chunks


def clipped_cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The non-negative similarity used by Facility: cosine of unit rows, clipped at 0."""
    return (a @ b.transpose(-1, -2)).clamp_min_(0)


class FacilityLocation(SetFunction):
    """`cover`: the ground set's rows that V holds (all when None). A uniform random sample of
    them makes f an unbiased estimate whose cost does not grow with N (scoring at 1M rows)."""

    name = "Facility"

    def __init__(self, memory_bytes: int = 256 * 2**20, cover: torch.Tensor | None = None):
        self.memory_bytes = memory_bytes
        self.cover = cover

    def covering(self, cover: torch.Tensor | None) -> "FacilityLocation":
        """The same function, its coverage measured on the rows `cover` of the ground set."""
        return FacilityLocation(self.memory_bytes, cover)

    def covered_unit(self, ground: GroundSet) -> torch.Tensor:
        return ground.unit if self.cover is None else ground.unit[self.cover]

    def covered_count(self, ground: GroundSet) -> int:
        return len(ground) if self.cover is None else len(self.cover)

    def incremental(self, ground: GroundSet) -> "CoverageGains":
        """The function in incremental form on this ground set (`CoverageGains`): the kernel of
        candidates against covered rows held when its float32 fits the memory budget, else its
        rows computed on demand."""
        covered = self.covered_unit(ground)
        return CoverageGains(similarity_rows(ground.unit, covered, self.memory_bytes),
                             len(ground), len(covered), ground.device)

    def coverage_lists(self, ground: GroundSet, k: int, keep: int,
                       coverage: torch.Tensor | None = None) -> "CoverageLists":
        """`CoverageLists` from one pass over the covered rows against all rows, in chunks: each
        covered row's similarities sorted, its `keep` largest kept, and its expected best of k
        random rows (`best_of_random_weights`) summed. With `coverage` (a selection's coverage of
        each covered row, `CoverageGains.cur`), the same pass also sums every row's gain on that
        selection (in float64), which would otherwise take a pass of its own."""
        covered, n = self.covered_unit(ground), len(ground)
        weights = best_of_random_weights(n, k, ground.device)
        keep = min(keep, n)
        count = min(n, max(len(weights), keep + 1))
        step = max(1, GAIN_CHUNK_BYTES // (24 * n))  # similarities, top values and indices
        values, candidates, total = [], [], 0.0
        gains = None if coverage is None else torch.zeros(n, dtype=torch.float64,
                                                          device=ground.device)
        for part, part_coverage in zip(covered.split(step), (
                repeat(None) if coverage is None else coverage.split(step))):
            sims = clipped_cosine(part, ground.unit)
            top = sims.topk(count, dim=1)
            total += top.values[:, :len(weights)].double().matmul(weights).sum().item()
            values.append(top.values[:, :keep + 1])
            candidates.append(top.indices[:, :keep])
            if gains is not None:
                gains += sims.sub_(part_coverage.unsqueeze(1)).clamp_min_(0).sum(
                    dim=0, dtype=torch.float64)
        values = torch.cat(values)
        rest = values[:, keep] if count > keep else torch.zeros_like(values[:, 0])
        return CoverageLists(values[:, :keep], torch.cat(candidates), rest, total / len(covered),
                             gains)

    def uses_kernel(self, rows: int, covered: int, n_masks: int, k: int) -> bool:
        """Whether `similarities` gathers from one rows x covered kernel rather than one GEMM
        per chunk of masks: where the masks hold more rows than the ground set and the kernel
        fits twice in the memory budget."""
        return n_masks * k > rows and 2 * 4 * rows * covered <= self.memory_bytes

    def batch_flops(self, rows: int, dim: int, n_masks: int, k: int) -> float:
        """The similarities of each mask's rows to the covered rows (a GEMM per chunk of masks,
        2 G k V d, or one kernel of every row, 2 n V d), then each mask's max over its rows,
        G k V."""
        covered = rows if self.cover is None else len(self.cover)
        products = (2 * rows * covered * dim if self.uses_kernel(rows, covered, n_masks, k)
                    else 2 * n_masks * k * covered * dim)
        return float(products + n_masks * k * covered)

    def similarities(self, ground: GroundSet, idx: torch.Tensor, copies: int):
        """(chunk, sims) per chunk of the masks `idx` (G, k): the cosines (c, k, n_cover) of each
        mask's rows to the covered rows, not yet clipped (clip commutes with max, so callers clip
        what they reduce to). When the masks hold more rows than the ground set (G k > n: at
        `partial` 0.1 each row is in ~G/10 masks), they are gathered from one kernel of every
        ground row against the covered rows, each computed once; else one GEMM per chunk. Both
        give the same numbers. `copies`: temporaries the caller keeps per similarity."""
        n_masks, k = idx.shape
        covered = self.covered_unit(ground)
        kernel_bytes = 4 * len(ground) * len(covered)
        use_kernel = self.uses_kernel(len(ground), len(covered), n_masks, k)
        kernel = ground.unit @ covered.T if use_kernel else None
        spare = chunk_bytes(self.memory_bytes - (kernel_bytes if use_kernel else 0),
                            ground.device)
        for chunk in mask_chunks(n_masks, 4 * copies * len(covered) * k, spare):
            if kernel is None:
                yield chunk, ground.unit[idx[chunk]] @ covered.T
            else:
                yield chunk, kernel[idx[chunk]]

    def batch(self, ground: GroundSet, idx: torch.Tensor) -> torch.Tensor:
        out = torch.empty(len(idx), device=idx.device, dtype=ground.features.dtype)
        for chunk, sims in self.similarities(ground, idx, copies=1):
            out[chunk] = sims.amax(dim=1).clamp_min_(0).mean(dim=1)
        return out

    def batch_with_credit(self, ground: GroundSet, idx: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """Values (G,) and each selected row's exact marginal contribution (G, k): f(S) minus
        f(S without the row), i.e. over the covered rows it is the best for, its clipped
        similarity minus that of the second best selected row (0 when it is alone)."""
        n_masks, k = idx.shape
        values = torch.empty(n_masks, device=idx.device, dtype=ground.features.dtype)
        credit = torch.zeros(n_masks, k, device=idx.device, dtype=ground.features.dtype)
        for chunk, sims in self.similarities(ground, idx, copies=2):
            if k == 1:
                best = sims[:, 0].clamp_min(0)
                owner = torch.zeros_like(best, dtype=torch.long)
                margin = best
            else:
                top = sims.topk(2, dim=1)  # (c, 2, n_cover): best and second best selected row
                best, owner = top.values[:, 0].clamp_min(0), top.indices[:, 0]
                margin = best - top.values[:, 1].clamp_min(0)
            values[chunk] = best.mean(dim=1)
            credit[chunk].scatter_add_(1, owner, margin)
        return values, credit / self.covered_count(ground)


GAIN_CHUNK_BYTES = 64 * 2**20  # similarity rows scored at once by a full pass of `CoverageGains`

# rows(idx): the (len(idx), n_cover) non-negative similarities of candidates idx to the rows being
# covered, as a tensor the caller may overwrite (a precomputed kernel's rows, or computed on demand)
Rows = Callable[[torch.Tensor], torch.Tensor]


class CoverageGains:
    """Facility location in incremental form for the greedy engine (`datamask.greedy`).

    With cur_v = max over S of sim(v, u), the gain of x is sum_v max(sim(v, x) - cur_v, 0). Gains
    only shrink as S grows (submodular), so the lazy greedy may keep stale ones as bounds.
    """

    def __init__(self, rows: Rows, n_cand: int, n_cover: int, device: torch.device | str = "cpu"):
        self.rows = rows
        self.n_cover = n_cover
        self.cur = torch.zeros(n_cover, device=device)  # max similarity of each covered row to S
        self.everyone = torch.arange(n_cand, device=device)
        self.covered = 0.0  # sum_v cur_v

    def __len__(self) -> int:
        return len(self.everyone)

    def gains(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        if idx is None:
            step = max(1, GAIN_CHUNK_BYTES // (4 * self.n_cover))
            return torch.cat([self.gains(part) for part in self.everyone.split(step)])
        return self.rows(idx).sub_(self.cur).clamp_min_(0).sum(dim=1)

    def coverage_with(self, gains: torch.Tensor, idx: torch.Tensor | None = None) -> torch.Tensor:
        """sum_v max(cur_v, sim(v, x)) for every candidate x (float64)."""
        return self.covered + gains.double()

    def value_with(self, gains: torch.Tensor, idx: torch.Tensor | None = None) -> torch.Tensor:
        """Facility of S + {x} for every candidate: its coverage over the covered rows' count."""
        return (self.coverage_with(gains) / self.n_cover).float()

    def add(self, row: int, gain: torch.Tensor) -> None:
        self.covered += gain.item()
        torch.maximum(self.cur, self.rows(self.everyone[row:row + 1])[0], out=self.cur)

    def add_all(self, rows: torch.Tensor) -> None:
        """Put a whole selection into S at once (one to certify), its similarity rows taken
        a chunk at a time rather than one `add` per row."""
        step = max(1, GAIN_CHUNK_BYTES // (4 * self.n_cover))
        for part in rows.split(step):
            torch.maximum(self.cur, self.rows(part).amax(dim=0), out=self.cur)
        self.covered = self.cur.double().sum().item()


@dataclass
class CoverageLists:
    """What bounds the coverage of any selection of k rows, from one pass over a facility
    location's similarities: each covered row's largest similarities, descending, and the
    candidates they are to; `rest`, at least every other similarity of the row (its next
    largest; 0 past a kNN kernel's entries); `random_value`, the exact mean of f over all
    k-subsets."""

    similarity: torch.Tensor  # (V, keep) float32
    candidate: torch.Tensor  # (V, keep) int64
    rest: torch.Tensor  # (V,) float32
    random_value: float
    gains: torch.Tensor | None = None  # (n,) float64: each row's gain on a selection, if asked


RANDOM_TAIL = 1e-12  # the probability mass `best_of_random_weights` may leave out


def best_of_random_weights(n: int, k: int, device: torch.device | str) -> torch.Tensor:
    """P(the best of k uniformly random rows of n is the j-th best), j = 1, 2, ...:
    w_j = C(n - j, k - 1) / C(n, k), so w_1 = k / n and w_{j+1} / w_j = (n - j - k + 1) / (n - j),
    in float64; cut where the rest sum to under RANDOM_TAIL (they fall about as (1 - k/n)^j, so a
    few n/k of them hold all but that)."""
    j = torch.arange(1, n - k + 1, dtype=torch.float64, device=device)
    ratios = torch.cat([torch.full((1,), k / n, dtype=torch.float64, device=device),
                        (n - j - k + 1) / (n - j)])
    weights = ratios.cumprod(0)
    rest = weights.flip(0).cumsum(0).flip(0)  # sum_{i >= j} w_i, summed from the small end
    return weights[:max(1, int((rest >= RANDOM_TAIL).sum()))]


def kernel_rows(kernel: torch.Tensor) -> Rows:
    """`rows` of a precomputed kernel, gathered into reused buffers (one per block size): the
    lazy greedy's hot path is this gather, and allocating it anew doubles its cost."""
    buffers: dict[int, torch.Tensor] = {}

    def rows(idx: torch.Tensor) -> torch.Tensor:
        if len(idx) not in buffers:
            buffers[len(idx)] = kernel.new_empty(len(idx), kernel.shape[1])
        return torch.index_select(kernel, 0, idx, out=buffers[len(idx)])

    return rows


def similarity_rows(unit_cand: torch.Tensor, unit_cover: torch.Tensor, memory_bytes: float) -> Rows:
    """`rows` of the clipped-cosine kernel: precomputed when its float32 fits `memory_bytes`,
    else computed on demand (one GEMM per call)."""
    if 4 * len(unit_cand) * len(unit_cover) <= memory_bytes:
        return kernel_rows(clipped_cosine(unit_cand, unit_cover))

    def rows(idx: torch.Tensor) -> torch.Tensor:
        return clipped_cosine(unit_cand[idx], unit_cover)

    return rows

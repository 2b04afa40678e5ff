"""Facility location on a sparse k-nearest-neighbour kernel (`Facility-kNN`): the route to a
million rows, where the N x N kernel of `Facility` would take terabytes.

The kernel keeps, for every covered row v, the clipped cosine to its `neighbours` nearest rows
(itself included) and 0 elsewhere:
    f(S) = (1/|V|) sum_v max_{u in S} K[v, u],   K[v, u] = max(cos(v, u), 0) if u in kNN(v).
It is still monotone submodular (a facility location on a non-negative kernel), so the greedy
bounds hold, and it equals `Facility` when `neighbours` is the number of rows. The neighbours
come from faiss: an exact inner-product search (`flat`) or an inverted-file index (`ivf`: the
rows clustered into `nlist` lists, `nprobe` of them searched per row), which costs about
N (nlist + nprobe N / nlist) d instead of N^2 d. The kernel is stored by candidate (compressed
rows: for each u, the rows v it may cover and K[v, u]), which is what a gain needs and the
layout apricot takes as a precomputed `scipy.sparse.csr_matrix`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..greedy import Optimizer, greedy
from .base import GroundSet, SetFunction, mask_chunks
from .facility import CoverageGains, CoverageLists, best_of_random_weights

INDEXES = ("flat", "ivf")
SEARCH_ROWS = 65536  # rows searched by faiss at once: bounds its (rows x neighbours) results
IVF_TRAIN_PER_LIST = 64  # rows that train the IVF's k-means, per list (faiss warns below 39)


NEIGHBOURS, NPROBE = 20, 16  # facility-knn-greedy's defaults: similarities kept, ivf lists searched


def default_nlist(n: int, per_root: float = 4.0) -> int:
    """IVF lists for n rows: about `per_root` sqrt(n) (4: faiss's rule of thumb), never more
    than n / 39 so that every list trains on enough rows."""
    return max(1, min(round(per_root * math.sqrt(n)), n // 39))


@dataclass
class KnnKernel:
    """The sparse kernel by candidate: the rows candidate u covers are
    `covered[start[u]:start[u + 1]]` with similarities `similarity[...]` (`owner` is u for
    each entry). `n` rows in all, `neighbours` per covered row."""

    start: torch.Tensor  # (n + 1,) int64
    covered: torch.Tensor  # (nnz,) int64
    similarity: torch.Tensor  # (nnz,) float32, > 0
    owner: torch.Tensor  # (nnz,) int64
    n: int
    neighbours: int

    @classmethod
    def from_neighbours(cls, neighbour: torch.Tensor, similarity: torch.Tensor) -> "KnnKernel":
        """From each covered row's (n, m) neighbour rows and similarities (faiss's search
        result: -1 for a missing neighbour); non-positive similarities are dropped (clipped)."""
        n, m = neighbour.shape
        keep = (neighbour >= 0) & (similarity > 0)
        covered = torch.arange(n).unsqueeze(1).expand(n, m)[keep]
        owner, sims = neighbour[keep], similarity[keep]
        order = torch.argsort(owner, stable=True)
        counts = torch.bincount(owner, minlength=n)
        start = torch.zeros(n + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=start[1:])
        return cls(start, covered[order], sims[order].float(), owner[order], n, m)

    def to(self, device: torch.device | str) -> "KnnKernel":
        return KnnKernel(self.start.to(device), self.covered.to(device),
                         self.similarity.to(device), self.owner.to(device), self.n,
                         self.neighbours)

    def entries(self, candidates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(positions of the kernel entries of `candidates`, the index into `candidates` each
        belongs to): a ragged gather as flat tensor ops."""
        first = self.start[candidates]
        counts = self.start[candidates + 1] - first
        segment = torch.repeat_interleave(torch.arange(len(candidates), device=first.device),
                                          counts)
        segment_start = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
        offset = torch.arange(len(segment), device=first.device) - segment_start
        return first[segment] + offset, segment

    def to_scipy(self):
        """The (candidate x covered row) matrix as a scipy.sparse.csr_matrix (apricot's input)."""
        from scipy.sparse import csr_matrix

        return csr_matrix((self.similarity.cpu().numpy(), self.covered.cpu().numpy(),
                           self.start.cpu().numpy()), shape=(self.n, self.n))


def knn_kernel(unit: torch.Tensor, neighbours: int, index: str = "flat", nlist: int | None = None,
               nprobe: int = NPROBE, seed: int = 0) -> KnnKernel:
    """The kNN kernel of unit rows (cosine = inner product), searched with faiss on the CPU."""
    from ..shared import require

    faiss = require("faiss", "the kNN facility kernel")

    if index not in INDEXES:
        raise ValueError(f"index must be one of {', '.join(INDEXES)}, got {index!r}")
    x = np.ascontiguousarray(unit.detach().cpu().numpy(), dtype=np.float32)
    n, dim = x.shape
    neighbours = min(neighbours, n)
    if index == "flat":
        search = faiss.IndexFlatIP(dim)
    else:
        nlist = nlist or default_nlist(n)
        search = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        search.cp.seed = seed
        train_rows = min(n, IVF_TRAIN_PER_LIST * nlist)
        sample = np.random.default_rng(seed).choice(n, train_rows, replace=False)
        search.train(x[np.sort(sample)])
        search.nprobe = min(nprobe, nlist)
    search.add(x)
    sims = np.empty((n, neighbours), dtype=np.float32)
    rows = np.empty((n, neighbours), dtype=np.int64)
    for begin in range(0, n, SEARCH_ROWS):
        sims[begin:begin + SEARCH_ROWS], rows[begin:begin + SEARCH_ROWS] = search.search(
            x[begin:begin + SEARCH_ROWS], neighbours)
    return KnnKernel.from_neighbours(torch.from_numpy(rows), torch.from_numpy(sims)).to(
        unit.device)


class SparseFacilityLocation(SetFunction):
    """Facility location on one ground set's kNN kernel (the ground set must have its rows)."""

    name = "Facility-kNN"

    def __init__(self, kernel: KnnKernel, memory_bytes: int = 256 * 2**20):
        self.kernel = kernel
        self.memory_bytes = memory_bytes

    def check(self, ground: GroundSet) -> None:
        if len(ground) != self.kernel.n:
            raise ValueError(f"the kNN kernel has {self.kernel.n} rows, the ground set "
                             f"{len(ground)}")

    def incremental(self, ground: GroundSet) -> "SparseCoverageGains":
        """The function in incremental form (`SparseCoverageGains`)."""
        self.check(ground)
        return SparseCoverageGains(self.kernel)

    def coverage_lists(self, ground: GroundSet, k: int, keep: int | None = None
                       ) -> CoverageLists:
        """`CoverageLists` of every kernel entry (`keep` is moot: a covered row has at most
        `neighbours`, its other similarities are 0), sorted by covered row and similarity into
        an (n, neighbours) layout padded with zeros."""
        self.check(ground)
        kernel = self.kernel
        by_value = torch.argsort(kernel.similarity, descending=True, stable=True)
        order = by_value[torch.argsort(kernel.covered[by_value], stable=True)]
        covered = kernel.covered[order]
        counts = torch.bincount(covered, minlength=kernel.n)
        rank = (torch.arange(len(order), device=covered.device)
                - (torch.cumsum(counts, 0) - counts)[covered])
        similarity = kernel.similarity.new_zeros(kernel.n, kernel.neighbours)
        candidate = torch.zeros_like(similarity, dtype=torch.int64)
        similarity[covered, rank] = kernel.similarity[order]
        candidate[covered, rank] = kernel.owner[order]
        weights = best_of_random_weights(kernel.n, k, covered.device)[:kernel.neighbours]
        random_value = similarity[:, :len(weights)].double().matmul(weights).mean().item()
        return CoverageLists(similarity, candidate, torch.zeros_like(similarity[:, 0]),
                             random_value)

    def batch_flops(self, rows: int, dim: int, n_masks: int, k: int) -> float:
        """No product: each mask's max over its rows' kernel entries (about k x neighbours, each
        row listed by as many covered rows as it is among the neighbours of), then its sum over
        the n covered rows."""
        return float(n_masks * (k * self.kernel.neighbours + rows))

    def batch(self, ground: GroundSet, idx: torch.Tensor) -> torch.Tensor:
        self.check(ground)
        kernel = self.kernel
        n_masks, k = idx.shape
        out = torch.empty(n_masks, device=idx.device)
        for chunk in mask_chunks(n_masks, 4 * kernel.n + 16 * k * kernel.neighbours,
                                 self.memory_bytes):
            rows = idx[chunk]
            positions, segment = kernel.entries(rows.reshape(-1))
            mask_of_entry = segment // k
            best = torch.zeros(len(rows) * kernel.n, device=idx.device)
            best.scatter_reduce_(0, mask_of_entry * kernel.n + kernel.covered[positions],
                                 kernel.similarity[positions], "amax")
            out[chunk] = best.view(len(rows), kernel.n).sum(dim=1) / kernel.n
        return out


class SparseCoverageGains(CoverageGains):
    """Facility location on a kNN kernel in incremental form for the greedy engine: the gain
    of x is sum over the rows v it may cover of max(K[v, x] - cur_v, 0), gathered from its
    kernel entries; every candidate's at once is one scatter-add over all entries."""

    def __init__(self, kernel: KnnKernel):
        super().__init__(rows=None, n_cand=kernel.n, n_cover=kernel.n,
                         device=kernel.start.device)
        self.kernel = kernel

    def gains(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        kernel = self.kernel
        if idx is None:
            positions, segment, size = slice(None), kernel.owner, kernel.n
        else:
            (positions, segment), size = kernel.entries(idx), len(idx)
        above = (kernel.similarity[positions] - self.cur[kernel.covered[positions]]).clamp_min_(0)
        return torch.zeros(size, device=self.cur.device).index_add_(0, segment, above)

    def add(self, row: int, gain: torch.Tensor) -> None:
        self.covered += gain.item()
        positions, _ = self.kernel.entries(self.everyone[row:row + 1])
        rows = self.kernel.covered[positions]
        self.cur[rows] = torch.maximum(self.cur[rows], self.kernel.similarity[positions])

    def add_all(self, rows: torch.Tensor) -> None:
        """Put a whole selection into S at once: one scatter of all its kernel entries."""
        positions, _ = self.kernel.entries(rows)
        self.cur.scatter_reduce_(0, self.kernel.covered[positions],
                                 self.kernel.similarity[positions], "amax")
        self.covered = self.cur.double().sum().item()


def knn_greedy(ground: GroundSet, kernel: KnnKernel, k: int, optimizer: Optimizer | str,
               record=None) -> tuple[list[int], list, SparseFacilityLocation]:
    """The greedy's k picks on `kernel`'s facility location (steps are small scatter-adds, so
    one thread after the first pass), with `record(step, term)`'s entry per pick: the route of
    `facility-knn-greedy` and of the learner's `--init knn` start."""
    objective = SparseFacilityLocation(kernel)
    term = objective.incremental(ground)
    picks, history = greedy(term, k, score=term.coverage_with, single_thread=True,
                            optimizer=optimizer,
                            record=None if record is None else (lambda step: record(step, term)))
    return picks, history, objective

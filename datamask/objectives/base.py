"""What every set function shares: the ground set it is evaluated on, and the batch contract.

A set function scores G masks at once. A mask is given as the row indices it selects, one row of
an index tensor `idx` of shape (G, k) into the ground set; a single mask is a 1-D `idx`. Every
function returns a value where HIGHER IS BETTER, so that the learner and every greedy optimiser can
maximise any of them (or their joint) without knowing which one it is.
"""

from __future__ import annotations

import torch


class GroundSet:
    """The rows a selection is drawn from, as tensors on one device.

    `unit` (each row L2-normalised; 0 for an all-zero row) is computed on first use and cached:
    the cosine metrics need it, DiSF does not, and a 1M x 768 block should not be held twice
    when only one form is used. `inverse_norms` (1 / ||row||, 0 for an all-zero row) is the cheap
    form of the same thing: Pair_simi scales its masks by it instead of forming `unit`, which on
    a learner's 100k-row partial step is two fresh 154 MB passes per step. A subset carries the
    cached forms along. `from_arrays` shares memory with a float32 numpy array on CPU.
    """

    def __init__(self, features: torch.Tensor, quality: torch.Tensor,
                 unit: torch.Tensor | None = None, inverse_norms: torch.Tensor | None = None):
        self.features = features  # (n, d) float32
        self.quality = quality  # (n,) float32
        self._unit = unit
        self._inverse_norms = inverse_norms

    @classmethod
    def from_arrays(cls, features, quality, device: str | torch.device = "cpu") -> "GroundSet":
        return cls(torch.as_tensor(features, dtype=torch.float32, device=device),
                   torch.as_tensor(quality, dtype=torch.float32, device=device))

    @property
    def unit(self) -> torch.Tensor:
        if self._unit is None:
            self._unit = torch.nn.functional.normalize(self.features, dim=1)
        return self._unit

    @property
    def inverse_norms(self) -> torch.Tensor:
        if self._inverse_norms is None:
            norms = torch.linalg.vector_norm(self.features, dim=1)
            self._inverse_norms = torch.where(norms > 0, norms.reciprocal(), 0.0)
        return self._inverse_norms

    def __len__(self) -> int:
        return self.features.shape[0]

    @property
    def device(self) -> torch.device:
        return self.features.device

    def subset(self, rows: torch.Tensor) -> "GroundSet":
        """The ground set restricted to `rows` (the learner's `partial` subsets, greedy batches)."""
        unit = None if self._unit is None else self._unit[rows]
        inverse = None if self._inverse_norms is None else self._inverse_norms[rows]
        return GroundSet(self.features[rows], self.quality[rows], unit, inverse)


def as_batch(idx: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """Accept one mask (k,) or a batch (G, k); return the batch and whether to squeeze it back."""
    if idx.dim() == 1:
        return idx.unsqueeze(0), True
    if idx.dim() != 2:
        raise ValueError(f"mask indices must have shape (k,) or (G, k), got {tuple(idx.shape)}")
    return idx, False


CPU_CHUNK_BYTES = 16 * 2**20


def chunk_bytes(memory_bytes: int, device: torch.device) -> int:
    """The temporaries one chunk of masks may hold: the function's memory cap, and on CPU no
    more than 16 MiB. There, allocations under glibc's largest mmap threshold (32 MiB) are reused
    once freed, where larger ones are faulted in and zeroed afresh on every evaluation (make
    bench-chunks: DiSF's and Facility's evaluations fault in ~10^5 pages with 256 MiB chunks, and
    take up to twice the time); an accelerator prefers fewer, larger kernels. Pair_simi keeps its
    whole budget: its chunk is one GEMM's operand, and there the larger GEMM wins."""
    return min(memory_bytes, CPU_CHUNK_BYTES) if device.type == "cpu" else memory_bytes


def mask_chunks(n_masks: int, bytes_per_mask: int, memory_bytes: int):
    """Slices over the G masks so that one chunk's temporaries stay under `memory_bytes`."""
    step = max(1, memory_bytes // max(1, bytes_per_mask))
    return [slice(start, min(start + step, n_masks)) for start in range(0, n_masks, step)]


class SetFunction:
    """A function of a selected set, evaluated on a batch of masks; higher is better."""

    name: str = ""

    def batch(self, ground: GroundSet, idx: torch.Tensor) -> torch.Tensor:
        """Values of the G masks in `idx` (G, k) as a (G,) float32 tensor."""
        raise NotImplementedError

    def batch_with_credit(self, ground: GroundSet, idx: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """Values (G,) and each selected row's marginal contribution to its mask (G, k), for the
        learner's per-row credit (`--credit row`)."""
        raise NotImplementedError(f"{self.name} has no per-row credit")

    def batch_flops(self, rows: int, dim: int, n_masks: int, k: int) -> float:
        """The arithmetic of `batch` on a ground set of `rows` x `dim` for `n_masks` masks of `k`
        rows, by the code path it takes there: 2 FLOPs a multiply-add of its matrix products
        (as torch.utils.flop_counter counts them), plus one an element of the reduction that is
        its bulk where no product is (quality's mean, Facility's max over a mask's rows). What
        a run's cost line reads."""
        raise NotImplementedError(f"{self.name} declares no cost")

    def __call__(self, ground: GroundSet, idx: torch.Tensor) -> torch.Tensor:
        """Value(s) of one mask (k,) or of G masks (G, k), indices on any device: a report or
        a scorer holds them on the CPU while the ground set may live on a GPU."""
        batch, single = as_batch(idx)
        values = self.batch(ground, batch.to(ground.device))
        return values[0] if single else values

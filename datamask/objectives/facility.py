"""Facility location (`Facility`): how well the selection covers the ground set.

f(S) = (1/|V|) sum_{v in V} max_{u in S} max(cos(v, u), 0), with V the whole ground set (the
current block or `partial` subset). Clipping the cosine at 0 keeps the similarity non-negative,
which makes f monotone submodular (greedy is within 1 - 1/e). The similarities are computed per
chunk of masks as one batched GEMM (V x d times d x k), never as an n x n kernel, so memory stays
bounded for any n.
"""

from __future__ import annotations

import torch

from .base import GroundSet, SetFunction, mask_chunks


def clipped_cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The non-negative similarity used by Facility: cosine of unit rows, clipped at 0."""
    return (a @ b.transpose(-1, -2)).clamp_min_(0)


class FacilityLocation(SetFunction):
    name = "Facility"

    def __init__(self, memory_bytes: int = 256 * 2**20):
        self.memory_bytes = memory_bytes

    def batch(self, ground: GroundSet, idx: torch.Tensor) -> torch.Tensor:
        n_masks, k = idx.shape
        n = len(ground)
        out = torch.empty(n_masks, device=idx.device, dtype=ground.features.dtype)
        # max and clip commute (clip is monotone), so clip the (G, n) maxima, not the (G, n, k) sims.
        for chunk in mask_chunks(n_masks, 4 * n * k, self.memory_bytes):
            sims = torch.matmul(ground.unit, ground.unit[idx[chunk]].transpose(1, 2))  # (c, n, k)
            out[chunk] = sims.amax(dim=2).clamp_min_(0).mean(dim=1)
        return out

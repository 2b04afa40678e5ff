"""DiSF (Fan et al., ICLR 2025): minus the dimensional-collapse score of the selected features.

Reference semantics (MediaBrain-SJTU/DiSF): over the k selected rows, standardise every feature
dimension, Z = (X - mean) / sqrt(unbiased var + 1e-8); C = Z^T Z / (k - 1) is the d x d
correlation matrix; score = sum of the squared OFF-diagonal entries of C, divided by 1e4. A lower
score is a less collapsed, more diverse selection, so the set function returns -score.

Batched evaluation never forms Z or C. With k >= 2d/3 it forms the (G, d, d) covariances with one
bmm: since C = D^-1/2 Cov D^-1/2 with D = diag(var + eps), the score follows from Cov alone
(collapse_score). With fewer rows (a learner step on a small partial ground set) it forms the (G, k, k)
Gram matrices of the weighted rows instead, as ||Z^T Z||_F = ||Z Z^T||_F: k^2 d work, not k d^2.

`probing(probes)` gives the learner a cheaper, unbiased estimate of the same score (--probes):
sum_ij corr_ij^2 = ||C||_F^2 = E ||C Q||_F^2 for random Q (d, p) with E[Q Q^T] = I (Hutchinson's
estimator of tr(C^2)), 4 k d p work a mask instead of 2 k d^2. The step's masks share one Q, so
their estimates err together and the differences the advantages see err less than each value.
"""

from __future__ import annotations

import math

import torch

from .base import GroundSet, SetFunction, chunk_bytes, mask_chunks

EPS = 1e-8
SCALE = 1e4


def collapse_score(covariance: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """DiSF score from unbiased covariances (..., d, d): sum of squared off-diagonal correlations.

    corr_ij^2 = cov_ij^2 w_i w_j with w = 1 / (var + eps), so the full sum is w^T (cov o cov) w:
    one elementwise square and one batched mat-vec, instead of materialising the correlations."""
    var = torch.diagonal(covariance, dim1=-2, dim2=-1)
    weight = 1.0 / (var + eps)
    total = (covariance.square() @ weight.unsqueeze(-1)).squeeze(-1).mul_(weight).sum(dim=-1)
    return (total - (var * weight).square().sum(dim=-1)) / SCALE


class DiSF(SetFunction):
    name = "DiSF"

    def __init__(self, memory_bytes: int = 256 * 2**20, eps: float = EPS,
                 probes: torch.Tensor | None = None):
        self.memory_bytes = memory_bytes
        self.eps = eps
        self.probes = probes  # (d, p) with E[probes probes^T] = I; None = the exact score

    def probing(self, probes: torch.Tensor | None) -> "DiSF":
        """The same function, each mask's score estimated with the shared `probes` (d, p)."""
        return DiSF(self.memory_bytes, self.eps, probes)

    def score(self, centred: torch.Tensor) -> torch.Tensor:
        """Collapse scores of centred rows (..., k, d): exact, or estimated with the probes."""
        if self.probes is None:
            return centred_collapse_score(centred, self.eps)
        return probed_collapse_score(centred, self.probes, self.eps)

    def batch_flops(self, rows: int, dim: int, n_masks: int, k: int) -> float:
        """Per mask, the path `score` takes: with probes (d, p) the two thin products, 4 k d p;
        exact, where `covariance_is_cheaper` the (d, d) covariance (2 k d^2) and its mat-vec
        with the weights (2 d^2), else the (k, k) Gram matrix, 2 k^2 d."""
        if self.probes is not None:
            per_mask = 4 * k * dim * self.probes.shape[1]
        elif covariance_is_cheaper(k, dim):
            per_mask = 2 * k * dim * dim + 2 * dim * dim
        else:
            per_mask = 2 * k * k * dim
        return float(n_masks * per_mask)

    def batch(self, ground: GroundSet, idx: torch.Tensor) -> torch.Tensor:
        n_masks, k = idx.shape
        if k < 2:
            raise ValueError("DiSF needs at least 2 selected rows (it uses an unbiased variance)")
        out = torch.empty(n_masks, device=idx.device, dtype=ground.features.dtype)
        for chunk in mask_chunks(n_masks, mask_bytes(ground, k),
                                 chunk_bytes(self.memory_bytes, ground.device)):
            x = ground.features[idx[chunk]]  # (c, k, d), a fresh copy: centre it in place
            out[chunk] = -self.score(x.sub_(x.mean(dim=1, keepdim=True)))
        return out

    def batch_with_credit(self, ground: GroundSet, idx: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """Values (G,) and a first-order marginal contribution of each selected row (G, k): the
        derivative of the value in a soft weight w_i on the row (its weight in the mean and the
        scatter), at w = 1, by one backward pass per chunk of masks. Removing the row sets w_i to
        0, so f(S) - f(S - {i}) is about df/dw_i."""
        n_masks, k = idx.shape
        if k < 2:
            raise ValueError("DiSF needs at least 2 selected rows (it uses an unbiased variance)")
        values = torch.empty(n_masks, device=idx.device, dtype=ground.features.dtype)
        credit = torch.empty(n_masks, k, device=idx.device, dtype=ground.features.dtype)
        # autograd keeps about three times the forward's temporaries
        for chunk in mask_chunks(n_masks, 3 * mask_bytes(ground, k),
                                 chunk_bytes(self.memory_bytes, ground.device)):
            x = ground.features[idx[chunk]]
            with torch.enable_grad():
                weight = torch.ones(x.shape[:2], dtype=x.dtype, device=x.device,
                                    requires_grad=True)
                mean = (weight.unsqueeze(2) * x).sum(dim=1, keepdim=True) / weight.sum(
                    dim=1, keepdim=True).unsqueeze(2)
                rows = (x - mean) * weight.sqrt().unsqueeze(2)  # scatter = rows^T rows
                score = self.score(rows)
                (grad,) = torch.autograd.grad(-score.sum(), weight)
            values[chunk] = -score.detach()
            credit[chunk] = grad
        return values, credit


def mask_bytes(ground: GroundSet, k: int) -> int:
    """Temporaries of scoring one k-row mask: its (k, d) rows twice and a (side, side) matrix
    twice, side = min(k, d) (the covariance or the Gram matrix)."""
    d, side = ground.features.shape[1], min(k, ground.features.shape[1])
    return ground.features.element_size() * (2 * k * d + 2 * side * side)


def covariance_is_cheaper(k: int, d: int) -> bool:
    """Whether k centred rows of d are scored through the (d, d) covariance rather than the
    (k, k) Gram matrix: for k >= 2d/3 (measured on CPU, d = 384)."""
    return 3 * k >= 2 * d


def centred_collapse_score(centred: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """collapse_score of centred rows (..., k, d) by the cheaper path (`covariance_is_cheaper`):
    the (d, d) covariances, else the (k, k) Gram matrices."""
    k, d = centred.shape[-2:]
    if covariance_is_cheaper(k, d):
        return collapse_score(centred.transpose(-1, -2) @ centred / (k - 1), eps)
    return gram_collapse_score(centred, eps)


def gram_collapse_score(centred: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """collapse_score from centred rows (..., k, d) through the (k, k) Gram matrix of the rows
    scaled by sqrt(w): sum_ij corr_ij^2 = ||Z Z^T||_F^2 / (k - 1)^2, minus the diagonal's."""
    k = centred.shape[-2]
    var = centred.square().sum(dim=-2) / (k - 1)
    weight = 1.0 / (var + eps)
    scaled = centred * weight.sqrt().unsqueeze(-2)
    gram = scaled @ scaled.transpose(-1, -2)
    total = gram.square().sum(dim=(-2, -1)) / (k - 1) ** 2
    return (total - (var * weight).square().sum(dim=-1)) / SCALE


def probed_collapse_score(centred: torch.Tensor, probes: torch.Tensor, eps: float = EPS
                          ) -> torch.Tensor:
    """Unbiased estimate of collapse_score from centred rows (..., k, d) and probes (d, p) with
    E[probes probes^T] = I: ||C probes||_F^2 estimates ||C||_F^2 for the correlation matrix
    C = D^1/2 X^T X D^1/2 / (k - 1), D = diag(w), formed as two thin products, never C itself.
    With p = d orthonormal probes it is the exact score."""
    k = centred.shape[-2]
    var = centred.square().sum(dim=-2) / (k - 1)
    weight = 1.0 / (var + eps)
    root = weight.sqrt().unsqueeze(-1)  # (..., d, 1)
    projected = centred @ (root * probes)  # (..., k, p)
    image = (centred.transpose(-1, -2) @ projected) * root  # (..., d, p): (k - 1) C probes
    total = image.square().sum(dim=(-2, -1)) / (k - 1) ** 2
    return (total - (var * weight).square().sum(dim=-1)) / SCALE


def probing_saves_work(probes: int, k: int, dim: int) -> bool:
    """Whether `probes` directions score a k-row mask with less work than the exact score:
    4 k d P flops against 2 k d min(k, d) (the covariance or the Gram path). Where they do not
    (small masks, or P >= d / 2), the exact score is both cheaper and exact."""
    return 0 < 2 * probes < min(k, dim)


def random_probes(dim: int, count: int, generator: torch.Generator,
                  device: torch.device | str) -> torch.Tensor:
    """`count` random orthonormal directions in R^dim, scaled by sqrt(dim / count) so that
    E[Q Q^T] = I (the orthonormal basis of a Gaussian matrix is rotation-invariant); at
    count = dim they span the space and the estimate is exact. Orthogonal probes err less than
    independent Gaussian ones."""
    count = min(count, dim)
    gaussian = torch.randn(dim, count, generator=generator, device=device)
    basis, _ = torch.linalg.qr(gaussian)
    return basis * math.sqrt(dim / count)


CHUNK_BYTES = 256 * 2**20  # temporaries of one chunk of candidates scored by `collapse_with`


class ScatterState:
    """Mean and scatter of the selected rows under exact rank-1 updates (Welford's).

    Adding a row x to a set S of m rows with mean mu and scatter M changes both by rank one:
    delta = x - mu, mean' = mu + delta / (m + 1), scatter' = M + m / (m + 1) delta delta^T, so the
    covariance of S + {x} is A + c delta delta^T with A = M / m, c = 1 / (m + 1). Its collapse
    score (w_i = 1 / (var_i + eps)) expands to
        w^T (A o A) w + 2c (w o delta)^T A (w o delta) + c^2 (sum_i w_i delta_i^2)^2
        - sum_i (var_i w_i)^2
    which needs two (candidates x d) @ (d x d) GEMMs for all candidates at once, instead of one
    (m + 1)-row covariance per candidate; the numbers are `collapse_score`'s on the from-scratch
    covariance up to float64 rounding.
    """

    def __init__(self, dim: int, dtype: torch.dtype, device: torch.device):
        self.count = 0
        self.mean = torch.zeros(dim, dtype=dtype, device=device)
        self.scatter = torch.zeros(dim, dim, dtype=dtype, device=device)

    def add(self, x: torch.Tensor) -> None:
        delta = x - self.mean
        self.scatter.add_(torch.outer(delta, delta), alpha=self.count / (self.count + 1))
        self.count += 1
        self.mean.add_(delta / self.count)

    def collapse_with(self, x: torch.Tensor) -> torch.Tensor:
        """Collapse score of S + {x} for every row of x (c, d); needs at least one row in S."""
        m = self.count
        cov = self.scatter / m
        cov_sq = cov.square()
        var = torch.diagonal(cov)
        c = 1.0 / (m + 1)
        out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
        step = max(1, CHUNK_BYTES // (x.element_size() * 6 * x.shape[1]))
        for start in range(0, x.shape[0], step):
            delta = x[start:start + step] - self.mean
            new_var = var + c * delta.square()
            w = 1.0 / (new_var + EPS)
            wd = w * delta
            total = ((w @ cov_sq) * w).sum(dim=1)
            total += 2 * c * ((wd @ cov) * wd).sum(dim=1)
            total += (c * (wd * delta).sum(dim=1)).square()
            total -= (new_var * w).square().sum(dim=1)
            out[start:start + step] = total / SCALE
        return out


class CollapseGains:
    """DiSF in incremental form for the greedy engine (`datamask.greedy`): the gain of x is minus
    the collapse score of S + {x} (float64, by rank-1 updates); 0 for every row while S is empty,
    where DiSF is undefined."""

    def __init__(self, features: torch.Tensor):
        self.features = features.double()
        self.state = ScatterState(self.features.shape[1], torch.float64, features.device)

    def __len__(self) -> int:
        return len(self.features)

    def gains(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        rows = self.features if idx is None else self.features[idx]
        if self.state.count == 0:
            return torch.zeros(len(rows), dtype=rows.dtype, device=rows.device)
        return -self.state.collapse_with(rows)

    def value_with(self, gains: torch.Tensor, idx: torch.Tensor | None = None) -> torch.Tensor:
        """DiSF of S + {x} for every candidate (float32, as `DiSF.batch`)."""
        return gains.float()

    def add(self, row: int, gain: torch.Tensor | None = None) -> None:
        self.state.add(self.features[row])

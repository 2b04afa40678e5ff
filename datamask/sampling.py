"""Sampling masks from the policy: k rows without replacement from softmax(logits).

Gumbel-top-k: adding independent Gumbel(0, 1) noise to the logits and keeping the k largest draws
k rows with exactly the law of k successive draws without replacement from softmax(logits), and
the order of the k keys is the order of those draws (Kool, van Hoof & Welling, ICML 2019). The
budget therefore holds in every rollout, and all G rollouts come from one (G, n) topk.
"""

from __future__ import annotations

import torch


def gumbel_topk(logits: torch.Tensor, k: int, n_samples: int,
                generator: torch.Generator | None = None, ordered: bool = True) -> torch.Tensor:
    """`n_samples` masks of k rows each, as a (n_samples, k) index tensor, in draw order when
    `ordered` (the exact Plackett-Luce probability needs it; the sets do not, and sorting the
    k keys is ~40% of the top-k at 100k candidates)."""
    gumbel = torch.empty(n_samples, logits.shape[0], device=logits.device)
    gumbel.exponential_(generator=generator).log_().neg_()  # -log(Exp(1)) ~ Gumbel(0, 1)
    return (logits.unsqueeze(0) + gumbel).topk(k, dim=1, sorted=ordered).indices


def simple_log_prob(logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """The paper's log P(M | L): the sum of log-softmax over the selected rows, per mask."""
    return torch.log_softmax(logits, dim=0)[idx].sum(dim=1)


def plackett_luce_log_prob(logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """The exact log-probability of drawing the rows of each mask in the given order:
    sum_t [L_{o_t} - log sum_{r not drawn before t} exp L_r]."""
    # float64: the remaining mass is a difference of sums and loses digits in float32.
    logits64 = logits.double()
    shift = logits64.max().detach()
    weights = (logits64 - shift).exp()
    chosen = weights[idx]  # (G, k)
    drawn_before = torch.cumsum(chosen, dim=1) - chosen
    remaining = (weights.sum() - drawn_before).clamp_min(torch.finfo(weights.dtype).tiny)
    return (logits64[idx] - shift - remaining.log()).sum(dim=1).to(logits.dtype)

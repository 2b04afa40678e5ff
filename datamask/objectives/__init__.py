"""The single source of truth for every objective: the learner, each greedy baseline and every
report evaluate selections through these set functions (one file per function)."""

from dataclasses import replace

from ..greedy import Optimizer, greedy
from .base import GroundSet, SetFunction, as_batch
from .certificates import (Certificate, certificate, certificate_fields, certify,
                          optimised_fields)
from .disf import (CollapseGains, DiSF, ScatterState, collapse_score, probing_saves_work,
                   random_probes)
from .facility import CoverageGains, FacilityLocation, clipped_cosine, kernel_rows, similarity_rows
from .joint import Joint, JointGains, TermScale, random_masks
from .pair_similarity import PairGains, PairSimilarity, pair_cosine_sum
from .quality import Quality, QualityGains
from .sparse_facility import (KnnKernel, SparseCoverageGains, SparseFacilityLocation,
                              knn_greedy, knn_kernel)

# The diversity metrics by the names of the original --algorithm flag.
DIVERSITY = {"Pair_simi": PairSimilarity, "Facility": FacilityLocation, "DiSF": DiSF}


def diversity(name: str) -> SetFunction:
    """A diversity metric by its --algorithm name."""
    try:
        return DIVERSITY[name]()
    except KeyError:
        raise ValueError(
            f"unknown --algorithm '{name}'; choose one of {', '.join(DIVERSITY)}"
        ) from None


def diversity_gains(name: str, ground: GroundSet, memory_bytes: float):
    """The incremental form (`datamask.greedy`'s term) of the --algorithm diversity metric on the
    ground set; Facility's kernel is held when its float32 fits `memory_bytes`, else its rows are
    computed on demand."""
    if name == "Pair_simi":
        return PairGains(ground)
    if name == "DiSF":
        return CollapseGains(ground.features)
    return FacilityLocation(memory_bytes).incremental(ground)


def exact_optimizer(gains) -> str:
    """The exact greedy's optimiser for these diversity gains: lazy where they only shrink as
    the set grows (Facility's coverage, submodular), naive elsewhere, where a stale gain is no
    bound."""
    return "lazy" if isinstance(gains, CoverageGains) else "naive"


def joint_greedy(objective: Joint, ground: GroundSet, algorithm: str, k: int,
                 memory_bytes: float, optimizer: Optimizer, record=None):
    """k picks of `datamask.greedy.greedy` on the joint objective (quality beside the
    --algorithm metric's incremental form, Facility's kernel held within `memory_bytes`), the
    picks and history it returns (`record`: the engine's). `optimizer` lazy is the exact greedy's
    picks (`exact_optimizer`); quality alone (lamb 1) is modular, so its exact top-k is taken
    whatever the optimiser. Facility's steps are small ops and run on one thread."""
    gains = diversity_gains(algorithm, ground, memory_bytes) if objective.lamb < 1 else None
    term = JointGains(objective, ground, gains)
    if gains is None:
        optimizer = replace(optimizer, name="naive")
    elif optimizer.name == "lazy":
        optimizer = replace(optimizer, name=exact_optimizer(gains))
    return greedy(term, k, optimizer=optimizer, score=term.value_with, record=record,
                  single_thread=isinstance(gains, CoverageGains))


__all__ = [
    "DIVERSITY", "Certificate", "CollapseGains", "CoverageGains", "DiSF", "FacilityLocation",
    "GroundSet", "Joint", "JointGains", "KnnKernel", "PairGains", "PairSimilarity", "Quality",
    "QualityGains", "ScatterState", "SetFunction", "SparseCoverageGains",
    "SparseFacilityLocation", "TermScale", "as_batch", "certificate", "certificate_fields",
    "certify", "clipped_cosine", "collapse_score", "diversity", "diversity_gains",
    "exact_optimizer", "joint_greedy", "kernel_rows", "knn_greedy", "knn_kernel",
    "optimised_fields", "pair_cosine_sum",
    "probing_saves_work", "random_masks", "random_probes", "similarity_rows",
]

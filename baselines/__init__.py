"""Baseline selectors, each one file, each registered by name with datamask.selectors."""

from . import (  # noqa: F401  (each registers its selector on import)
    cluster_quota, disf_greedy, disf_greedy_fast, facility_greedy, joint_greedy, knn_density, mmr,
    pair_greedy, quality_threshold, quality_topk, random_subset, semdedup,
)

"""Baseline selectors, each one file, each registered by name with datamask.selectors."""

from . import quality_topk, random_subset  # noqa: F401

"""Figures 4, 6 and 7, drawn from the pipeline demo's files (`make pipeline-demo`): its prepared
rows (embeddings, quality), each method's selection.parquet, and its Table 2. (Figure 5, the
length bias, reads `make length-bias`'s results: figures/plots.py.)

4 embeddings: the rows in the first two principal components, each method's selection on top
  (the paper's Figure 2). 6 quality x redundancy: k-means clusters of the rows, binned by mean
  quality and by redundancy (mean cosine to the cluster centre), and the share of each bin's rows
  each method selected. 7 Table 2 of the demo (eval/tables.py's table2.csv) as a figure.
"""

from __future__ import annotations

import csv
import glob
import os

import matplotlib.pyplot as plt
import numpy as np
import pyarrow.parquet as pq

from datamask.data import read_dataset


def load(pipeline: str) -> dict | None:
    """Rows of the prepared files and every method's selection mask, aligned by chunk_id."""
    files = sorted(glob.glob(os.path.join(pipeline, "prepared", "*.parquet")))
    selections = sorted(glob.glob(os.path.join(pipeline, "select", "*", "selection.parquet")))
    if not files or not selections:
        return None
    data = read_dataset(files)
    order = np.argsort(data.ids)
    masks = {}
    for path in selections:
        table = pq.read_table(path, columns=["chunk_id", "selected"])
        ids, chosen = table["chunk_id"].to_numpy(), table["selected"].to_numpy()
        rows = order[np.searchsorted(data.ids, ids, sorter=order)]
        mask = np.zeros(len(data), dtype=bool)
        mask[rows[chosen]] = True
        masks[os.path.basename(os.path.dirname(path))] = mask
    return {"features": data.features, "quality": data.quality, "masks": masks}


def embeddings(rows: dict):
    """Figure 4: PCA of the L2-normalised embeddings (the space the diversity metrics use)."""
    unit = rows["features"] / np.linalg.norm(rows["features"], axis=1, keepdims=True)
    centred = unit - unit.mean(axis=0)
    _, share, vt = np.linalg.svd(centred, full_matrices=False)
    xy = centred @ vt[:2].T
    explained = share[:2] ** 2 / (share**2).sum()
    masks = rows["masks"]
    fig, axes = plt.subplots(1, len(masks), figsize=(4 * len(masks), 4), squeeze=False,
                             sharex=True, sharey=True)
    for i, (ax, (method, mask)) in enumerate(zip(axes[0], masks.items())):
        ax.scatter(*xy[~mask].T, s=4, c="lightgrey", label="not selected")
        ax.scatter(*xy[mask].T, s=6, c=f"C{i}", label=f"selected ({mask.sum()})")
        ax.set_title(method)
        ax.set_xlabel(f"PC1 ({explained[0]:.0%} of variance)")
        ax.legend(fontsize=7, markerscale=2)
    axes[0][0].set_ylabel(f"PC2 ({explained[1]:.0%} of variance)")
    fig.suptitle(f"Selected subsets in the first two principal components ({len(xy)} rows)")
    fig.tight_layout()
    return fig


def kmeans(unit: np.ndarray, k: int, seed: int = 0, iterations: int = 25) -> np.ndarray:
    """Spherical k-means labels (cosine), vectorised; seeded, so the figure is reproducible."""
    rng = np.random.default_rng(seed)
    centres = unit[rng.choice(len(unit), k, replace=False)]
    for _ in range(iterations):
        labels = (unit @ centres.T).argmax(axis=1)
        sums = np.zeros_like(centres)
        np.add.at(sums, labels, unit)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        centres = np.where(norms > 0, sums / np.maximum(norms, 1e-12), centres)
    return labels


def quality_redundancy(rows: dict, n_clusters: int = 30, n_bins: int = 3):
    """Figure 6: clusters binned into quality x redundancy terciles; cell = share selected."""
    unit = rows["features"] / np.linalg.norm(rows["features"], axis=1, keepdims=True)
    labels = kmeans(unit, n_clusters)
    count = np.bincount(labels, minlength=n_clusters)
    quality = np.bincount(labels, rows["quality"], n_clusters) / np.maximum(count, 1)
    sums = np.zeros((n_clusters, unit.shape[1]))
    np.add.at(sums, labels, unit)
    centre = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    cosine = (unit * centre[labels]).sum(axis=1)
    redundancy = np.bincount(labels, cosine, n_clusters) / np.maximum(count, 1)
    used = count > 0
    edges = lambda v: np.quantile(v[used], np.linspace(0, 1, n_bins + 1)[1:-1])  # noqa: E731
    q_bin = np.digitize(quality, edges(quality))[labels]
    r_bin = np.digitize(redundancy, edges(redundancy))[labels]
    cell = q_bin * n_bins + r_bin
    rows_per_cell = np.bincount(cell, minlength=n_bins**2)
    masks = rows["masks"]
    grids = {method: np.where(rows_per_cell > 0, np.bincount(cell[mask], minlength=n_bins**2)
                              / np.maximum(rows_per_cell, 1), np.nan).reshape(n_bins, n_bins)
             for method, mask in masks.items()}
    top = max(np.nanmax(g) for g in grids.values())
    ticks = ["low", "mid", "high"] if n_bins == 3 else list(range(n_bins))
    fig, axes = plt.subplots(1, len(masks), figsize=(3.6 * len(masks) + 1, 4), squeeze=False)
    for ax, (method, grid) in zip(axes[0], grids.items()):
        image = ax.imshow(grid, origin="lower", cmap="viridis", vmin=0, vmax=top)
        for (qi, ri), value in np.ndenumerate(grid):
            if np.isfinite(value):
                ax.text(ri, qi, f"{value:.0%}\n({rows_per_cell[qi * n_bins + ri]} rows)",
                        ha="center", va="center", fontsize=7,
                        color="white" if value < 0.6 * top else "black")
        ax.set_xticks(range(n_bins), ticks)
        ax.set_yticks(range(n_bins), ticks)
        ax.set_xlabel("cluster redundancy")
        ax.set_title(method)
    axes[0][0].set_ylabel("cluster mean quality")
    fig.colorbar(image, ax=axes[0].tolist(), label="share of the cell's rows selected")
    fig.suptitle(f"Share of rows selected, by cluster quality x redundancy ({n_clusters} k-means "
                 "clusters in terciles;\nredundancy = mean cosine of a cluster's rows to its "
                 f"centre; overall share {next(iter(masks.values())).mean():.0%})", fontsize=10)
    return fig


def table2(path: str):
    """Figure 7: the demo's Table 2 (accuracy in %, +- lm-eval standard error)."""
    with open(path) as f:
        records = list(csv.DictReader(f))
    columns = [c for c in records[0] if c != "method" and not c.endswith("_stderr")]

    def cell(record, column):
        value, err = record[column], record.get(f"{column}_stderr")
        if not value:
            return "-"
        digits = 3 if "bits" in column else 1
        return f"{float(value):.{digits}f}" + (f" ± {float(err):.{digits}f}" if err else "")

    fig, ax = plt.subplots(figsize=(2 + 1.8 * len(columns), 0.5 * len(records) + 1.4))
    ax.axis("off")
    table = ax.table(cellText=[[cell(r, c) for c in columns] for r in records],
                     rowLabels=[r["method"] for r in records], colLabels=columns, loc="center")
    table.scale(1, 1.5)
    ax.set_title("Table 2, pipeline demo (BBC tasks; accuracies in %, bits/byte lower is "
                 "better)\nnot the paper's 12 tasks or model scale", fontsize=10)
    fig.tight_layout()
    return fig

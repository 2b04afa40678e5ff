"""Figures of the reproduction (`make figures`): PNG and PDF files drawn from the results files of
`reproduce.experiments` and of the pipeline demo; every file is written atomically (`save`).
Drawing needs no screen: matplotlib's file-only backend is chosen here, before any figure module
imports pyplot."""

import os

from datamask.shared import require_extra

require_extra("pipeline", "the figures (package figures)")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from datamask.data import atomic_output  # noqa: E402


def save(fig, output: str, name: str) -> list[str]:
    """PNG and PDF of `fig`, each through a temporary name."""
    paths = []
    for ext in ("png", "pdf"):
        path = os.path.join(output, f"{name}.{ext}")
        with atomic_output(path) as tmp:
            fig.savefig(tmp, format=ext, dpi=120, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths

"""`quality-topk`: the k rows of highest quality score (ties to the lower row index)."""

from __future__ import annotations

import numpy as np

from datamask.data import Dataset
from datamask.selectors import Selector
from datamask.shared import top_rows


class QualityTopK(Selector):
    name = "quality-topk"

    def _select(self, data: Dataset, k: int):
        selected = np.zeros(len(data), dtype=bool)
        selected[top_rows(data.quality, np.zeros_like(data.quality), k)] = True
        return selected, data.quality, []

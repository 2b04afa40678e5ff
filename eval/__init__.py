"""Evaluation of trained checkpoints with lm-eval (local YAML tasks under eval/tasks) and the
paper's Table 2 layout built from the results, beside the paper's own numbers. Needs the `eval`
extra: its import says which package is missing and the pip line, before any module fails."""

from datamask.shared import require_extra

require_extra("eval", "the evaluation (package eval)")

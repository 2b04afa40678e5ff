"""Evaluation of trained checkpoints with lm-eval (local YAML tasks under eval/tasks) and the
paper's Table 2 layout built from the results, beside the paper's own numbers."""

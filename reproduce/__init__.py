"""The reproduction pipeline: FineWeb shards -> prepare -> select (in blocks, on datatrove
executors) -> tokenize (datatrove) -> train (transformers) -> evaluate (lm-eval) -> tables.

Each stage reads the files of the one before; `python -m reproduce --help` lists them. Needs the
`pipeline` extra: its import says which package is missing and the pip line, before any module
fails."""

from datamask.shared import require_extra

require_extra("pipeline", "the reproduction pipeline (package reproduce)")

"""The reproduction pipeline: FineWeb shards -> prepare -> select (in blocks, on datatrove
executors) -> tokenize (datatrove) -> train (transformers) -> evaluate (lm-eval) -> tables.

Each stage reads the files of the one before; `python -m reproduce --help` lists them."""

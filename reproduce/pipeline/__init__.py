"""The reproduction pipeline, one module a stage in the order the data flows: bbc (the embedded
default corpus as FineWeb shards), prepare (id, quality; embedders: the embedding), select (a
method in blocks), tokenize (datatrove), train (a small LM), then eval/ (lm-eval); engines runs a
stage on datatrove's executors, common holds what they share, gpu_check compares the GPU with the
CPU. The lowest layer of reproduce: it imports nothing from the pool, the CLI, the benchmarks or
the experiments (docs/design.md)."""

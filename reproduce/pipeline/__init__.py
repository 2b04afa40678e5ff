"""The reproduction pipeline, one module a stage in the order the data flows: bbc (the embedded
default corpus as FineWeb shards), prepare (id, quality, embedding), select (a method in blocks),
tokenize (datatrove), train (a small LM), then eval/ (lm-eval); downstream runs the chain on the
pool for many methods and seeds, gpu_check compares the GPU with the CPU."""

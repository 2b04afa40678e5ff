"""Benchmarks (`make bench`, `bench-chunks`, `bench-soak`, `bench-baselines`): speed and memory
measured side by side in one run, printed as ratios; never assertions. One module a target."""

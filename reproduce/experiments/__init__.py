"""Paper-reproduction experiments (`make reproduce-timing`, `make ablation-*`, `make downstream`):
each module runs one experiment at a scale this machine can hold and writes `<name>.json` and
`<name>.md`; downstream runs the pipeline's stages on the pool through the CLI, in stage workers;
findings decides the claims from every results folder, the benchmarks' included. The top layer
of reproduce (docs/design.md)."""

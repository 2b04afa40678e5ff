"""Paper-reproduction experiments (`make reproduce-timing`, `make ablation-*`): each module runs one
experiment at a scale this machine can hold and writes `<name>.json` and `<name>.md`."""

"""Baseline selectors, one file each, registered by name with the core through the
`datamask.selectors` entry points of pyproject.toml (the core never imports this package)."""

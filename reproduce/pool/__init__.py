"""A web-like pool for downstream evaluation: four domains of real text that install offline,
cut into web-page-sized documents, with planted duplicates, boilerplate and junk (labelled), plus
held-out text per domain. See build.py for the layout and README.md for the rules and rates."""

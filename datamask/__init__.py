"""datamask: a harness for DATAMASK (Fan, Xian, Sun, Shen; arXiv 2512.24265, ICLR 2026) and the
baselines it is compared with. The objectives live in `datamask.objectives`, the learner in
`datamask.learner`, and every selector behind `datamask.selectors.make_selector(name)`."""

__version__ = "0.1.0"

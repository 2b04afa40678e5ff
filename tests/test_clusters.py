"""`make clusters` (reproduce/experiments/clusters.py) and the cluster labels of the synthetic rows
it reads."""

import numpy as np

from datamask.examples.synthetic import synthetic_clusters, synthetic_dataset
from reproduce.experiments import clusters
from reproduce.experiments.records import ClustersResult, read_result


def test_the_labels_are_the_clusters_the_rows_were_drawn_around():
    data, cluster = synthetic_clusters(600, dim=16, n_clusters=5, seed=3)
    same = synthetic_dataset(600, dim=16, n_clusters=5, seed=3)
    assert np.array_equal(data.ids, same.ids) and np.array_equal(data.features, same.features)
    assert cluster.shape == (600,) and set(np.unique(cluster)) <= set(range(5))
    centres = {c: data.features[cluster == c].mean(axis=0) for c in np.unique(cluster)}
    # every row is nearer its own cluster's centre than any other's
    nearest = np.array([min(centres, key=lambda c: np.linalg.norm(row - centres[c]))
                        for row in data.features])
    assert np.array_equal(nearest, cluster)


def test_covered_counts_clusters_with_a_selected_row_and_the_largest_share():
    cluster = np.array([0, 0, 0, 1, 1, 2, 3, 3])
    selected = np.array([True, True, False, False, True, False, False, False])
    assert clusters.covered(cluster, selected, 4) == (2, 2 / 3)
    assert clusters.covered(cluster, cluster == 3, 4) == (1, 1.0)


def test_one_run_per_metric_lamb_and_seed_and_random_beside_them(tmp_path):
    out = tmp_path / "clusters"
    result = clusters.main(["--n", "300", "--dim", "8", "--clusters", "4", "--seeds", "0", "1",
                            "--lambs", "0", "0.5", "--metrics", "DiSF", "Pair_simi",
                            "--output", str(out)])
    assert [(r.metric, r.lamb, r.seed) for r in result.runs] == [
        (m, lamb, s) for m in ("DiSF", "Pair_simi") for lamb in (0.0, 0.5) for s in (0, 1)]
    assert len(result.random) == 4
    for r in result.runs + result.random:
        assert 1 <= r.clusters <= 4 and 0.25 <= r.largest_share <= 1.0
        assert (r.clusters == 1) == (r.largest_share == 1.0)
    assert all(0 <= r.written_step <= r.steps for r in result.runs)
    # DiSF has no bound to stop on; Pair_simi's certified start may end its run before a step
    assert all(r.steps >= 1 for r in result.runs if r.metric == "DiSF")
    # random's and a run's values of one metric are on one scale: the same rows, the same function
    assert {r.metric for r in result.random} == {"DiSF", "Pair_simi"}
    back = read_result(str(out), "clusters")
    assert isinstance(back, ClustersResult) and back.to_json() == result.to_json()
    table = (out / "clusters.md").read_text()
    for row in ("| DiSF | 0 | 2 |", "| DiSF | 0.5 | 2 |", "| random (Pair_simi) |  | 2 |"):
        assert row in table

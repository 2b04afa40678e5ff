"""Data to try the method on, not the method: a synthetic clustered shard in the data contract
(`datamask synth`, the tests, the benchmarks) and the selectors' demo on it (`datamask demo`)."""

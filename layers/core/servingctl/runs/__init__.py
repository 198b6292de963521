"""Benchmark runs on the cloud: the run_benchmark worker's actions (plan, calibrate, run a scenario or a
shard, merge, compare, finish), the scenario matrix and the shard split, over the bench engine, the
stores, the registry and the price catalog."""

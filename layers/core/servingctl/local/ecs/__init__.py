"""ECS as the twin plays it: the benchmark task's process (tasks)."""

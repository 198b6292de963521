"""ECS as the twin plays it: moto's services and tasks patched (patches), the service scheduler and
its tasks over time (scheduler), the benchmark task's process (tasks)."""

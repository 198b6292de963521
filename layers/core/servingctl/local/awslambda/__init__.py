"""Lambda as the twin plays it: Invoke runs the real handler (patches) in an execution environment of
its function (runtime)."""

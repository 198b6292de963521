"""Lambda as the twin plays it: execution environments of the real handlers (runtime)."""

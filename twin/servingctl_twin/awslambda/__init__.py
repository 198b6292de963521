"""Lambda as the twin plays it: Invoke runs the real handler (patches) through the router (router), in an
execution environment of its function (runtime)."""

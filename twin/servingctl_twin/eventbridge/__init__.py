"""EventBridge as the twin plays it: the sweep's schedule and the status-change rule of template.yaml (rules)."""

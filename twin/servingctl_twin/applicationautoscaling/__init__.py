"""Application Auto Scaling as the twin plays it: ECS service target tracking."""

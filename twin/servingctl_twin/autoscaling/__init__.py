"""EC2 Auto Scaling as the twin plays it: groups launching and terminating over time, scaling
activities, warm pools (patches, groups)."""

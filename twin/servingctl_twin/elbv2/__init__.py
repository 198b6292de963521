"""Elastic Load Balancing v2 as the twin plays it: the ALBs' data plane, health checks and metrics
(load_balancers), and the target health DescribeTargetHealth reports (patches)."""

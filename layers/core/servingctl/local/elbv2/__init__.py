"""Elastic Load Balancing v2 as the twin plays it: the ALBs' data plane, target health and metrics (load_balancers)."""

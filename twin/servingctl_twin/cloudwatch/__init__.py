"""CloudWatch as the twin plays it: the containers' log streams (logs), GetMetricStatistics' rounded
StartTime (patches); the ALBs' metrics are servingctl_twin.elbv2's."""

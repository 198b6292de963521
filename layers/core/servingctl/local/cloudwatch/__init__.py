"""CloudWatch as the twin plays it: the containers' log streams (logs); the ALBs' metrics are servingctl.local.elbv2's."""

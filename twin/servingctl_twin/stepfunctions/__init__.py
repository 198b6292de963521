"""Step Functions as the twin plays it: moto's interpreter with AWS's service integrations (integrations),
quotas (quotas) and execution closing and read consistency (executions)."""

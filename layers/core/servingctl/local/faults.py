"""The faults the local twin's world simulator can inject (names shared by the CLI and the world)."""

FAULTS: dict[str, str] = {
    "capacity-unavailable": "every instance launch fails with InsufficientInstanceCapacity; Fargate RunTask places nothing",
    "task-crash": "every task stops soon after RUNNING: Essential container in task exited",
    "never-healthy": "the target never passes its health check",
    "protected-instance": "instances launch protected from scale-in",
    "smoke-fails-once": "the first GET /v1/models of each task answers 503 (simulator model server only)",
    "throttle-once": "the first call of each of a few APIs answers a throttling error",
    "roll-back-fails": "every RollBack of start_profile fails (its DynamoDB writes answer an internal error)",
    "prepare-stop-fails-once": "the next PrepareStop of stop_profile fails (its DynamoDB read answers an internal error)",
}

"""Step Functions' moto patches: its service integrations, its quotas and its executions' closing and reads."""

from servingctl_twin.stepfunctions import executions, integrations, quotas

PATCHES = [*integrations.PATCHES, *quotas.PATCHES, *executions.PATCHES]

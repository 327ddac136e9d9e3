"""The AWS state-change events completion tracking listens to (decision 0049):
the stack's EventBridge rules match them (infra/constructs/completions.py); the
domain, which imports nothing of dynacron, reads the same names
(domain/executions/completion.py; tests/unit/test_completion_events.py keeps
them equal)."""

from __future__ import annotations

STEP_FUNCTIONS_SOURCE = "aws.states"
STEP_FUNCTIONS_EVENT = "Step Functions Execution Status Change"
# A state machine execution in these has ended.
STEP_FUNCTIONS_ENDED = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")
ECS_SOURCE = "aws.ecs"
ECS_EVENT = "ECS Task State Change"
# An ECS task has ended when its last status is this.
ECS_ENDED = "STOPPED"
# Dynacron's tracked runs' names (a state machine execution's name, an ECS task's
# startedBy) start so: the rules match only those.
RUN_NAME_PREFIX = "dynacron-"

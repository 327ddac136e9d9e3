"""Pure domain model: schedules, tasks, executions and time. No AWS, no HTTP."""

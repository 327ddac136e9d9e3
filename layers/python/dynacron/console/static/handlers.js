// What a task calls, as a person names it: its URL, its Python handler, or its AWS
// target by service and resource name ("SQS queue jobs"), not a blank URL.
// The same rules as the CLI's (dynacron/cli/target_names.py).

const KINDS = {
  lambda: ["Lambda function", "function:"],
  sqs: ["SQS queue", ""],
  sns: ["SNS topic", ""],
  events: ["EventBridge bus", "event-bus/"],
  states: ["Step Functions state machine", "stateMachine:"],
  ecs: ["ECS cluster", "cluster/"],
};

export function describeTarget(arn, taskDefinitionArn) {
  const parts = arn.split(":");
  if (parts.length < 6 || !(parts[2] in KINDS)) return arn;
  const [kind, prefix] = KINDS[parts[2]];
  const resource = parts.slice(5).join(":");
  const name = prefix && resource.startsWith(prefix) ? resource.slice(prefix.length) : resource;
  if (parts[2] === "ecs" && taskDefinitionArn) {
    return `ECS task ${taskDefinitionArn.split("task-definition/").pop()} on cluster ${name}`;
  }
  return `${kind} ${name}`;
}

// A task's handler as text: what the task list and the task's page show.
export function handlerLabel(task) {
  if (task.target) return describeTarget(task.target.arn, task.target.ecs_parameters?.task_definition_arn);
  if (task.handler) return `Python handler ${task.handler}`;
  return task.handler_url || "";
}

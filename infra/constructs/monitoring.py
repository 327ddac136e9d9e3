"""Alarms to an SNS topic, and one dashboard with the same metrics."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from dynacron import metric_names
from dynacron.resources import DEAD_LETTER_QUEUE, DISPATCH_QUEUE, UNDELIVERED_QUEUE
from infra.config import SchedulerConfig
from infra.constructs.nag import acknowledge
from infra.constructs.queues import Queues

ONE_MINUTE = Duration.minutes(1)
FIVE_MINUTES = Duration.minutes(5)
# Read within seconds normally; older means its function keeps failing.
UNDELIVERED_ALARM_SECONDS = 600
WAITING = (
    metric_names.WAITING_ON_CONCURRENCY,
    metric_names.WAITING_ON_RATE,
    metric_names.WAITING_ON_BREAKER,
    metric_names.WAITING_ON_PAUSE,
)
# Each host's breaker, from the worker's "breaker open|closed" and "breaker
# half-open: probing" log lines (with the host): one row per host, no metric per
# host to pay for.
BREAKERS_BY_HOST_QUERY = "\n".join(
    [
        "fields @timestamp, host, message",
        "filter ispresent(host) and message like /^breaker /",
        "stats latest(message) as state, max(@timestamp) as since by host",
        "sort since desc",
        "limit 100",
    ]
)


def dynacron_metric(
    name: str, statistic: str, period: Duration = FIVE_MINUTES
) -> cloudwatch.Metric:
    """A metric the runtime emits with Powertools (EMF), with the dimensions it uses."""
    return cloudwatch.Metric(
        namespace=metric_names.NAMESPACE,
        metric_name=name,
        dimensions_map={metric_names.SERVICE_DIMENSION: metric_names.SERVICE},
        statistic=statistic,
        period=period,
    )


class Monitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: SchedulerConfig,
        queues: Queues,
        functions: dict[str, lambda_.Function],
    ) -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic(self, "AlarmTopic", display_name="dynacron alarms", enforce_ssl=True)
        acknowledge(
            self.topic,
            "AwsSolutions-SNS2",
            "CloudWatch cannot publish to a topic encrypted with the AWS managed key, and "
            "alarm notifications carry only alarm names and states; a customer managed "
            "key would cost more than the rest of the idle stack.",
        )
        if config.alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(config.alarm_email))

        dispatch, dead_letters = queues.queue(DISPATCH_QUEUE), queues.queue(DEAD_LETTER_QUEUE)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        self._alarm(
            "DeadLettersPresent",
            "Executions are in the dead-letter queue",
            dead_letters.metric_approximate_number_of_messages_visible(
                statistic="Maximum", period=ONE_MINUTE
            ),
            threshold=0,
        )
        self._alarm(
            "OldestDispatchTooOld",
            "The oldest dispatched execution waits too long for a worker",
            dispatch.metric_approximate_age_of_oldest_message(
                statistic="Maximum", period=ONE_MINUTE
            ),
            threshold=config.oldest_message_alarm_seconds,
            periods=3,
        )
        for name in ("tick", "worker"):
            function = functions[name]
            self._alarm(
                f"{name.title()}Errors",
                f"The {name} function fails",
                function.metric_errors(statistic="Sum", period=ONE_MINUTE),
                threshold=0,
            )
            self._alarm(
                f"{name.title()}Throttles",
                f"The {name} function is throttled",
                function.metric_throttles(statistic="Sum", period=ONE_MINUTE),
                threshold=0,
            )
        self._alarm(
            "SchedulingLagP99",
            f"p99 scheduling lag above {config.scheduling_lag_alarm_seconds:g} s",
            dynacron_metric(metric_names.SCHEDULING_LAG, "p99"),
            threshold=config.scheduling_lag_alarm_seconds,
        )
        self._alarm(
            "ExpiredLeases",
            "Executions whose lease ran out were reaped (a worker died or stalled)",
            dynacron_metric(metric_names.LEASES_REAPED, "Sum"),
            threshold=config.expired_leases_alarm_threshold,
        )
        self._alarm(
            "BreakerOpened",
            "A handler host failed repeatedly: its circuit breaker opened",
            dynacron_metric(metric_names.BREAKER_OPENED, "Sum"),
            threshold=0,
        )
        self._alarm(
            "DispatchPaced",
            "For 15 minutes the dispatch queue held as much as the tick may enqueue: "
            "due work waits to be dispatched (workers cannot keep up)",
            dynacron_metric(metric_names.DISPATCH_PACED, "Sum"),
            threshold=0,
            periods=3,
        )
        self._alarm(
            "LimitLateness",
            f"Limits, open breakers and paused hosts made executions wait more than "
            f"{config.limit_lateness_alarm_seconds:g} s in all in 5 minutes",
            dynacron_metric(metric_names.LIMIT_LATENESS, "Sum"),
            threshold=config.limit_lateness_alarm_seconds,
        )
        self._alarm(
            "UndeliveredNotSettled",
            "Dispatch messages that never began wait to be recorded as dead letters "
            "(the undelivered queue's function fails)",
            queues.queue(UNDELIVERED_QUEUE).metric_approximate_age_of_oldest_message(
                statistic="Maximum", period=ONE_MINUTE
            ),
            threshold=UNDELIVERED_ALARM_SECONDS,
            periods=3,
        )
        self._alarm(
            "TasksSetAside",
            "A task made the tick or the reaper raise and was set aside (ERROR, with the "
            "reason on the task): its owner must fix it, or a scheduler bug hit it",
            dynacron_metric(metric_names.TASKS_SET_ASIDE, "Sum", ONE_MINUTE),
            threshold=0,
        )
        self._alarm(
            "LeasesSetAside",
            "An expired lease made the reaper raise and was taken out of the sweep "
            "(reason on the execution)",
            dynacron_metric(metric_names.LEASES_SET_ASIDE, "Sum", ONE_MINUTE),
            threshold=0,
        )
        self._alarm(
            "TickFailures",
            "Ticks of the looping tick raised (the loop backs off and goes on); "
            "for 3 minutes in a row",
            dynacron_metric(metric_names.TICK_FAILURES, "Sum", ONE_MINUTE),
            threshold=0,
            periods=3,
        )
        self.dashboard = self._dashboard(dispatch, dead_letters, functions)

    def _alarm(
        self,
        construct_id: str,
        description: str,
        metric: cloudwatch.Metric,
        *,
        threshold: float,
        periods: int = 1,
    ) -> None:
        alarm = metric.create_alarm(
            self,
            construct_id,
            alarm_description=description,
            threshold=threshold,
            evaluation_periods=periods,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            # No data means nothing happened: no errors, no lag, no dead letters.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(actions.SnsAction(self.topic))
        alarm.add_ok_action(actions.SnsAction(self.topic))
        self.alarms[construct_id] = alarm

    def _dashboard(
        self, dispatch: sqs.Queue, dead_letters: sqs.Queue, functions: dict[str, lambda_.Function]
    ) -> cloudwatch.Dashboard:
        dashboard = cloudwatch.Dashboard(self, "Dashboard")
        dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(
                title="Alarms", alarms=list(self.alarms.values()), width=24, height=4
            )
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Scheduling lag (s)",
                left=[
                    dynacron_metric(metric_names.SCHEDULING_LAG, "p50", ONE_MINUTE),
                    dynacron_metric(metric_names.SCHEDULING_LAG, "p99", ONE_MINUTE),
                ],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Executions",
                left=[
                    dynacron_metric(name, "Sum", ONE_MINUTE)
                    for name in (
                        metric_names.RETRIES,
                        metric_names.FAILURES,
                        metric_names.DEAD_LETTERS,
                        metric_names.LEASES_REAPED,
                        metric_names.DUPLICATES_SUPPRESSED,
                    )
                ],
                width=12,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Executions waiting on a limit, breaker or pause",
                left=[dynacron_metric(name, "Sum", ONE_MINUTE) for name in WAITING],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Lateness caused by limits (s)",
                left=[dynacron_metric(metric_names.LIMIT_LATENESS, "Sum", ONE_MINUTE)],
                right=[dynacron_metric(metric_names.LIMIT_LATENESS, "Maximum", ONE_MINUTE)],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Dispatch queue depth seen by the tick",
                left=[dynacron_metric(metric_names.QUEUE_DEPTH, "Maximum", ONE_MINUTE)],
                right=[dynacron_metric(metric_names.DISPATCH_PACED, "Sum", ONE_MINUTE)],
                width=8,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Set aside: tasks and leases that raised, and failed ticks",
                left=[
                    dynacron_metric(name, "Sum", ONE_MINUTE)
                    for name in (
                        metric_names.TASKS_SET_ASIDE,
                        metric_names.LEASES_SET_ASIDE,
                        metric_names.TICK_FAILURES,
                    )
                ],
                width=24,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Breaker changes",
                left=[
                    dynacron_metric(name, "Sum", ONE_MINUTE)
                    for name in (
                        metric_names.BREAKER_OPENED,
                        metric_names.BREAKER_HALF_OPENED,
                        metric_names.BREAKER_CLOSED,
                        metric_names.HOSTS_PAUSED,
                    )
                ],
                width=8,
            ),
            cloudwatch.LogQueryWidget(
                title="Breaker state per host (last change)",
                log_group_names=[functions["worker"].log_group.log_group_name],
                query_string=BREAKERS_BY_HOST_QUERY,
                view=cloudwatch.LogQueryVisualizationType.TABLE,
                width=16,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Dispatch queue",
                left=[
                    dispatch.metric_approximate_number_of_messages_visible(period=ONE_MINUTE),
                    dead_letters.metric_approximate_number_of_messages_visible(period=ONE_MINUTE),
                ],
                right=[dispatch.metric_approximate_age_of_oldest_message(period=ONE_MINUTE)],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Functions: errors and throttles",
                left=[
                    metric
                    for function in functions.values()
                    for metric in (
                        function.metric_errors(period=ONE_MINUTE),
                        function.metric_throttles(period=ONE_MINUTE),
                    )
                ],
                width=12,
            ),
        )
        return dashboard

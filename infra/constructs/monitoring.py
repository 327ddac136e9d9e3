"""Alarms to an SNS topic, and one dashboard with the same metrics."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from dynacron.definitions import metric_names
from dynacron.definitions.resources import DEAD_LETTER_QUEUE, DISPATCH_QUEUE, UNDELIVERED_QUEUE
from infra.config import SchedulerConfig
from infra.constructs.firewall import ApiFirewall
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
# A shard without a heartbeat for this many minutes in a row is not being ticked.
# Heartbeats come every second; even a tick cut at its lease bound (20 s) leaves
# some in each minute, and 3 minutes ride out a late EventBridge invocation.
TICK_STOPPED_MINUTES = 3
# A metric math alarm reads at most 10 metrics: one alarm per 10 shards.
SHARDS_PER_TICK_ALARM = 10
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


def shard_heartbeat(shard: int, period: Duration = ONE_MINUTE) -> cloudwatch.Metric:
    """Ticks of one shard (its looping tick emits one after every tick)."""
    return cloudwatch.Metric(
        namespace=metric_names.NAMESPACE,
        metric_name=metric_names.TICK_HEARTBEAT,
        dimensions_map={
            metric_names.SERVICE_DIMENSION: metric_names.SERVICE,
            metric_names.SHARD_DIMENSION: str(shard),
        },
        statistic="Sum",
        period=period,
        label=f"shard {shard}",
    )


def finished(outcome: str) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=metric_names.NAMESPACE,
        metric_name=metric_names.EXECUTIONS_FINISHED,
        dimensions_map={
            metric_names.SERVICE_DIMENSION: metric_names.SERVICE,
            metric_names.OUTCOME_DIMENSION: outcome,
        },
        statistic="Sum",
        period=ONE_MINUTE,
        label=outcome,
    )


def ticked_shards(shards: range) -> cloudwatch.MathExpression:
    """The fewest ticks any of ``shards`` had in a minute: 0 when one stopped.

    A shard with no data at all (its tick never ran) counts as 0, not as missing.
    """
    using = {f"shard{shard}": shard_heartbeat(shard) for shard in shards}
    return cloudwatch.MathExpression(
        expression=f"MIN([{', '.join(f'FILL({name}, 0)' for name in using)}])",
        using_metrics=using,
        period=ONE_MINUTE,
        label="fewest ticks of one shard in a minute",
    )


def failure_rate(min_attempts: int, period: Duration = FIVE_MINUTES) -> cloudwatch.MathExpression:
    """Failed attempts as a percentage of ended ones, and 0 below ``min_attempts``
    (one failure among two is not a page). No attempts at all: no data."""
    return cloudwatch.MathExpression(
        expression=f"IF(attempts >= {min_attempts}, 100 * FILL(failures, 0) / attempts, 0)",
        using_metrics={
            "attempts": dynacron_metric(metric_names.ATTEMPTS, "Sum", period),
            "failures": dynacron_metric(metric_names.FAILURES, "Sum", period),
        },
        period=period,
        label="failed attempts (%)",
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
        api_stage: apigateway.Stage | None = None,
        firewall: ApiFirewall | None = None,
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
        self._blind_spot_alarms(config, functions, api_stage)
        self.dashboard = self._dashboard(dispatch, dead_letters, functions)
        self._totals_and_timings_widgets(config)
        if firewall is not None:
            # No alarm: blocking a flood is the rule doing its job. A handler fleet
            # behind one address that the callback rule blocks shows here, and as
            # callbacks that never arrive (leases reaped, FailureRate).
            self.dashboard.add_widgets(
                cloudwatch.GraphWidget(
                    title="API requests answered 429 by WAF, per source-address rule",
                    left=[firewall.metric_blocked(rule, ONE_MINUTE) for rule in firewall.rules],
                    width=24,
                )
            )

    def _blind_spot_alarms(
        self,
        config: SchedulerConfig,
        functions: dict[str, lambda_.Function],
        api_stage: apigateway.Stage | None,
    ) -> None:
        """A shard whose tick stopped, the reaper and the API failing, too many
        attempts failing, executions waiting too long for a worker (issue 13)."""
        for first in range(0, config.shard_count, SHARDS_PER_TICK_ALARM):
            shards = range(first, min(first + SHARDS_PER_TICK_ALARM, config.shard_count))
            self._alarm(
                f"TickStoppedShards{shards[0]}To{shards[-1]}",
                f"A shard among {shards[0]}-{shards[-1]} was not ticked for "
                f"{TICK_STOPPED_MINUTES} minutes (no TickHeartbeat): its tick never "
                "started, crashes, or lost its schedule; its tasks do not fire",
                ticked_shards(shards),
                threshold=1,
                periods=TICK_STOPPED_MINUTES,
                comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                # A heartbeat that stops is the failure itself: no data breaches.
                missing=cloudwatch.TreatMissingData.BREACHING,
            )
        for name in ("reaper", "api"):
            self._alarm(
                f"{name.title()}Errors",
                f"The {name} function fails (Lambda Errors)",
                functions[name].metric_errors(statistic="Sum", period=ONE_MINUTE),
                threshold=0,
            )
        if "claim" in functions:
            # Decision 0025: a failed claim loses nothing (the looping tick finds the
            # page again), but claims that keep failing leave bursts to the small tick.
            self._alarm(
                "ClaimErrors",
                "The claim function fails (Lambda Errors): pages handed out are claimed "
                "late, by the looping tick",
                functions["claim"].metric_errors(statistic="Sum", period=ONE_MINUTE),
                threshold=0,
            )
        if api_stage is not None:
            self._alarm(
                "ApiServerErrors",
                "The API answered 5XX (its function raised, timed out or was throttled)",
                api_stage.metric_server_error(statistic="Sum", period=ONE_MINUTE),
                threshold=0,
            )
        self._alarm(
            "FailureRate",
            f"More than {config.failure_rate_alarm_percent:g}% of attempts failed in 5 "
            f"minutes (with at least {config.failure_rate_alarm_min_attempts} attempts)",
            failure_rate(config.failure_rate_alarm_min_attempts),
            threshold=config.failure_rate_alarm_percent,
        )
        self._alarm(
            "QueueLatencyP99",
            f"p99 queue latency above {config.queue_latency_alarm_seconds:g} s: "
            "executions wait for a worker",
            dynacron_metric(metric_names.QUEUE_LATENCY, "p99"),
            threshold=config.queue_latency_alarm_seconds,
        )

    def _totals_and_timings_widgets(self, config: SchedulerConfig) -> None:
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Ticks per minute, by shard (none: the shard is not ticked)",
                left=[shard_heartbeat(shard) for shard in range(config.shard_count)],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Attempts and failed attempts (%)",
                left=[
                    dynacron_metric(metric_names.ATTEMPTS, "Sum", ONE_MINUTE),
                    dynacron_metric(metric_names.FAILURES, "Sum", ONE_MINUTE),
                ],
                right=[failure_rate(config.failure_rate_alarm_min_attempts)],
                width=12,
            ),
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Executions finished, by outcome",
                left=[finished(outcome) for outcome in ("SUCCEEDED", "FAILED", "SKIPPED")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Handler call duration (s); Python handlers past their timeout",
                left=[
                    dynacron_metric(metric_names.HANDLER_DURATION, statistic, ONE_MINUTE)
                    for statistic in ("p50", "p99", "Maximum")
                ],
                # A gauge per worker process: the most any one held in the minute.
                right=[
                    dynacron_metric(metric_names.PYTHON_HANDLERS_OVERRUNNING, "Maximum", ONE_MINUTE)
                ],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Queue latency: sent or due to a worker's start (s)",
                left=[
                    dynacron_metric(metric_names.QUEUE_LATENCY, statistic, ONE_MINUTE)
                    for statistic in ("p50", "p99", "Maximum")
                ],
                width=8,
            ),
        )

    def _alarm(
        self,
        construct_id: str,
        description: str,
        metric: cloudwatch.IMetric,
        *,
        threshold: float,
        periods: int = 1,
        comparison: cloudwatch.ComparisonOperator = (
            cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
        ),
        # For counts of trouble, no data means nothing happened: no errors, no lag,
        # no dead letters. A heartbeat's alarm says otherwise.
        missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
    ) -> None:
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            metric=metric,
            alarm_description=description,
            threshold=threshold,
            evaluation_periods=periods,
            comparison_operator=comparison,
            treat_missing_data=missing,
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
                width=16,
            ),
            cloudwatch.GraphWidget(
                title="Clock steps (decision 0037)",
                left=[dynacron_metric(metric_names.CLOCK_STEPS, "Sum", ONE_MINUTE)],
                width=8,
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

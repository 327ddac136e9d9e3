"""The composition root: settings and an adapter set in, every service built.

``Dynacron`` is dynacron composed: the services wired on one adapter set (AWS
by default, on the clients given), and the Lambda events they answer
(``events.LambdaEvents``). The Lambda entry points (``functions``) build one from
the environment; local mode and the tests build one from explicit settings.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import boto3

from dynacron.adapters.aws import aws_adapters
from dynacron.adapters.aws.clients import CLAIM_INVOKE_CONFIG, aws_client_config
from dynacron.adapters.aws.due_page_hand_out import LambdaDuePageHandOut
from dynacron.adapters.delivery.connections import (
    HandlerUrlCheck,
    KeptPrivateNetworks,
    PrivateNetworksOf,
    Resolver,
    system_resolver,
)
from dynacron.adapters.delivery.http import HandlerDelivery, HttpDelivery, SecretsOf
from dynacron.adapters.delivery.notifications import HttpNotifier
from dynacron.adapters.delivery.python_handlers import PythonDelivery
from dynacron.adapters.delivery.registry import (
    HandlerRegistry,
    default_registry,
    import_handler_modules,
)
from dynacron.adapters.delivery.run_descriptions import TargetRunDescriber
from dynacron.adapters.delivery.secrets import KeptSecrets
from dynacron.adapters.delivery.targets import (
    AssumedRoles,
    ClientFactory,
    TargetDelivery,
    client_factory,
)
from dynacron.adapters.messages import dispatch_only_from_body
from dynacron.adapters.powertools.idempotency import IdempotentHandlerCalls
from dynacron.adapters.powertools.metrics import Emit, ReliabilityMetrics, print_emf
from dynacron.api.routes import build_api
from dynacron.definitions.environment import DEFAULT_EXECUTION_RETENTION_DAYS
from dynacron.definitions.resources import DISPATCH_QUEUE
from dynacron.domain.clock import Clock, SystemClock
from dynacron.domain.coordination.quotas import TenantRateLimiter
from dynacron.domain.coordination.tenants import TenantQuota
from dynacron.domain.tasks.urls import UrlPolicy, tenant_private_networks
from dynacron.entry.events import LambdaEvents
from dynacron.entry.settings import Settings
from dynacron.ports import AdapterSet, DispatchQueue, DuePageHandOut
from dynacron.ports.delivery import Delivery
from dynacron.ports.faults import NO_FAULTS, Faults
from dynacron.ports.metrics import NO_METRICS, Metrics
from dynacron.services.calendars import CalendarService
from dynacron.services.clock_steps import ClockSteps, lease_hold, monotonic_of
from dynacron.services.completions import CompletionTracker
from dynacron.services.executions import ExecutionService
from dynacron.services.follow_ups import FollowUps, RunStarter
from dynacron.services.forecast import HerdForecast
from dynacron.services.limits import LimitGate
from dynacron.services.message_holds import MessageHolds
from dynacron.services.notifications import NotificationDeliveries, TaskNotifications
from dynacron.services.outcomes import AttemptOutcomes
from dynacron.services.reap import Reaper
from dynacron.services.tasks import TaskService
from dynacron.services.tick import Ticker
from dynacron.services.undelivered import UndeliveredDispatches
from dynacron.services.work import ExecutionRunner

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient
    from types_boto3_sqs.client import SQSClient

EXECUTION_RETENTION = timedelta(days=DEFAULT_EXECUTION_RETENTION_DAYS)


class Dynacron(LambdaEvents):
    """Every service of dynacron, built from ``settings`` on one adapter set.

    ``adapters`` defaults to the AWS set on the ``dynamodb`` and ``sqs`` clients;
    ``dispatch_queue`` replaces its queue (tests record what is sent). The rest
    stand in for the world in tests and local mode: the clock and sleep, HTTP
    ``delivery`` (or ``wrap_delivery`` around the default one) and DNS
    ``resolver``, Python ``handlers``, where metrics go, injected ``faults``, and
    how AWS targets' clients are made (``target_clients``).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        dynamodb: DynamoDBClient | None = None,
        sqs: SQSClient | None = None,
        adapters: AdapterSet | None = None,
        clock: Clock | None = None,
        delivery: Delivery | None = None,
        sleep: Callable[[float], None] = time.sleep,
        resolver: Resolver = system_resolver,
        handlers: HandlerRegistry | None = None,
        emit_metrics: Emit = print_emf,
        faults: Faults = NO_FAULTS,
        dispatch_queue: DispatchQueue | None = None,
        page_claims: DuePageHandOut | None = None,
        wrap_delivery: Callable[[Delivery], Delivery] | None = None,
        target_clients: ClientFactory | None = None,
    ) -> None:
        import_handler_modules(settings.handler_modules)
        self.settings = settings
        self.clock = clock or SystemClock()
        self._sleep = sleep
        self.faults = faults
        self.handlers = handlers or default_registry
        self.resolver = resolver
        # One set of roles for the worker's target calls and the reaper's describes:
        # a role and tenant's credentials are assumed once for both.
        self.target_roles = assumed_roles(settings, self.clock, target_clients)
        self.metrics = ReliabilityMetrics(emit_metrics)
        # One watch of the wall clock for the tick, the reaper and the worker.
        self.clock_steps = ClockSteps(
            self.clock,
            monotonic_of(self.clock),
            hold=lease_hold(settings.lease_terms),
            metrics=self.metrics,
        )
        if adapters is None:
            # Deployed (and in most tests): the AWS set, on the clients given.
            if dynamodb is None or sqs is None:
                raise TypeError("Dynacron needs an adapter set, or DynamoDB and SQS clients")
            adapters = aws_adapters(
                settings,
                dynamodb=dynamodb,
                sqs=sqs,
                execution_retention=timedelta(days=settings.execution_retention_days),
            )
        self._take_ports(adapters, dispatch_queue)
        self._compose_scheduling(page_claims)
        self._compose_outcomes()
        self._compose_runner(delivery, wrap_delivery)
        self._compose_control()

    def _take_ports(self, adapters: AdapterSet, dispatch_queue: DispatchQueue | None) -> None:
        self.adapters = adapters
        self.tasks = adapters.tasks
        self.tenants = adapters.tenants
        self.executions = adapters.executions
        self.cursors = adapters.cursors
        self.leases = adapters.leases
        self.queue = dispatch_queue or adapters.queue
        self.dead_letter_queue = adapters.dead_letter_queue

    def _compose_scheduling(self, page_claims: DuePageHandOut | None) -> None:
        """Registering tasks, and the tick that finds them due."""
        settings = self.settings
        self.starter = RunStarter(
            executions=self.executions,
            queue=self.queue,
            clock=self.clock,
            lease_terms=settings.lease_terms,
        )
        self.task_service = TaskService(
            tasks=self.tasks,
            execution_store=self.executions,
            tenants=self.tenants,
            create_keys=self.adapters.create_keys,
            starter=self.starter,
            settings=settings.task_settings,
            clock=self.clock,
            handlers=self.handlers,
            urls=HandlerUrlCheck(
                UrlPolicy(settings.delivery_allow_networks),
                self.resolver,
                private_networks_reader(settings, self.tenants.quota),
            ),
            targets=settings.target_policy,
            calendar_service=CalendarService(
                calendars=self.adapters.calendars,
                tasks=self.tasks,
                clock=self.clock,
                sharding=settings.task_settings.sharding,
            ),
        )
        self.ticker = Ticker(
            tasks=self.tasks,
            executions=self.executions,
            queue=self.queue,
            cursors=self.cursors,
            settings=settings.tick_settings,
            clock=self.clock,
            faults=self.faults,
            metrics=self.metrics,
            sleep=self._sleep,
            page_claims=page_claims,
            steps=self.clock_steps,
        )

    def _compose_outcomes(self) -> None:
        """How an attempt ends, and what its end owes."""
        self.task_notifications = TaskNotifications(
            tasks=self.tasks, executions=self.executions, queue=self.queue, clock=self.clock
        )
        self.follow_ups = FollowUps(
            tasks=self.tasks,
            executions=self.executions,
            starter=self.starter,
            sharding=self.settings.sharding,
            clock=self.clock,
            metrics=self.metrics,
            notifications=self.task_notifications,
        )
        self.outcomes = AttemptOutcomes(
            executions=self.executions,
            queue=self.queue,
            dead_letter_queue=self.dead_letter_queue,
            metrics=self.metrics,
            clock=self.clock,
            lease_terms=self.settings.lease_terms,
            follow_ups=self.follow_ups,
            faults=self.faults,
        )

    def _compose_runner(
        self, delivery: Delivery | None, wrap: Callable[[Delivery], Delivery] | None
    ) -> None:
        """The worker's attempt: guarded handler calls under the hosts' limits."""
        settings = self.settings
        terms = settings.lease_terms
        self.message_holds = MessageHolds(self.queue, terms) if settings.message_holds else None
        delivery = delivery or default_delivery(
            settings,
            self.clock,
            self.handlers,
            secrets_of=self.tenants.signing_secrets,
            resolver=self.resolver,
            metrics=self.metrics,
            target_roles=self.target_roles,
            private_networks_of=private_networks_reader(settings, self.tenants.quota),
        )
        self.notification_deliveries = NotificationDeliveries(
            notifier=HttpNotifier(
                UrlPolicy(settings.delivery_allow_networks),
                settings.http_timeout_seconds,
                settings.api_base_url,
                secrets_of=KeptSecrets(self.tenants.signing_secrets, self.clock),
                resolver=self.resolver,
                private_networks_of=private_networks_reader(settings, self.tenants.quota),
            ),
            queue=self.queue,
        )
        self.runner = ExecutionRunner(
            tasks=self.tasks,
            executions=self.executions,
            queue=self.queue,
            delivery=wrap(delivery) if wrap is not None else delivery,
            handler_calls=IdempotentHandlerCalls(
                ttl_seconds=settings.idempotency_ttl_seconds,
                handler_timeout_seconds=settings.http_timeout_seconds,
                faults=self.faults,
            ),
            outcomes=self.outcomes,
            metrics=self.metrics,
            clock=self.clock,
            lease_terms=terms,
            faults=self.faults,
            limits=LimitGate(
                store=self.adapters.limits,
                metrics=self.metrics,
                clock=self.clock,
                breaker=settings.breaker_policy,
                call_timeout=timedelta(seconds=settings.http_timeout_seconds),
                clock_skew=terms.clock_skew,
                max_pause=timedelta(seconds=settings.max_retry_after_seconds),
            ),
            steps=self.clock_steps,
            notifications=self.task_notifications,
        )

    def _compose_control(self) -> None:
        """The reaper, the undelivered queue's settling, and the API over the services."""
        settings = self.settings
        self.completion_tracker = CompletionTracker(
            executions=self.executions,
            tasks=self.tasks,
            outcomes=self.outcomes,
            clock=self.clock,
            describer=TargetRunDescriber(self.target_roles)
            if self.target_roles is not None
            else None,
        )
        self.lease_reaper = Reaper(
            executions=self.executions,
            queue=self.queue,
            outcomes=self.outcomes,
            metrics=self.metrics,
            clock=self.clock,
            lease_terms=settings.lease_terms,
            max_per_run=settings.reaper_max_per_run,
            faults=self.faults,
            tasks=self.tasks,
            steps=self.clock_steps,
            completions=self.completion_tracker,
        )
        self.undelivered_dispatches = UndeliveredDispatches(
            tasks=self.tasks,
            executions=self.executions,
            outcomes=self.outcomes,
            dead_letter_queue=self.dead_letter_queue,
            metrics=self.metrics,
            clock=self.clock,
            lease_terms=settings.lease_terms,
            max_receive_count=DISPATCH_QUEUE.max_receive_count or 0,
            decode=dispatch_only_from_body,
            faults=self.faults,
            steps=self.clock_steps,
        )
        self.execution_service = ExecutionService(
            executions=self.executions,
            queue=self.queue,
            dead_letter_queue=self.dead_letter_queue,
            outcomes=self.outcomes,
            clock=self.clock,
            lease_terms=settings.lease_terms,
        )
        self.forecast = HerdForecast(
            tasks=self.tasks,
            clock=self.clock,
            max_tasks=settings.forecast_max_tasks,
            max_occurrences=settings.forecast_max_occurrences,
        )
        self._api = build_api(
            self.task_service,
            self.execution_service,
            settings,
            TenantRateLimiter(
                self.clock,
                settings.tenant_rate_per_second,
                settings.tenant_rate_burst,
                rate_of=lambda tenant: self.task_service.quota(tenant).rate_per_second,
            ),
            self.forecast,
            self.outside_api_lock,
        )

    @classmethod
    def from_environment(cls) -> Dynacron:
        """As deployed: settings from the environment, clients from the function's role."""
        settings = Settings.from_env(os.environ)
        config = aws_client_config(settings)
        page_claims = None
        if settings.claim_function:
            # Only the looping tick is given a claim function (infra/constructs/tick.py).
            page_claims = LambdaDuePageHandOut(
                boto3.client("lambda", config=CLAIM_INVOKE_CONFIG), settings.claim_function
            )
        return cls(
            settings,
            dynamodb=boto3.client("dynamodb", config=config),
            sqs=boto3.client("sqs", config=config),
            page_claims=page_claims,
        )


def default_delivery(
    settings: Settings,
    clock: Clock,
    handlers: HandlerRegistry,
    *,
    secrets_of: SecretsOf,
    resolver: Resolver = system_resolver,
    metrics: Metrics = NO_METRICS,
    target_roles: AssumedRoles | None = None,
    private_networks_of: PrivateNetworksOf | None = None,
) -> Delivery:
    """HTTP handlers under the URL policy, signed with each tenant's secrets (kept
    a few seconds: ``KeptSecrets``), and Python handlers from ``handlers`` (their
    calls past the timeout counted in ``metrics``)."""
    return HandlerDelivery(
        HttpDelivery(
            UrlPolicy(settings.delivery_allow_networks),
            settings.http_timeout_seconds,
            clock,
            settings.api_base_url,
            secrets_of=KeptSecrets(secrets_of, clock),
            resolver=resolver,
            follow_cross_host=settings.follow_cross_host_redirects,
            max_retry_after_seconds=settings.max_retry_after_seconds,
            # A grant read at most every 30 s per worker, not on every delivery.
            private_networks_of=private_networks_of
            and KeptPrivateNetworks(private_networks_of, clock),
        ),
        PythonDelivery(
            handlers,
            timeout_seconds=settings.http_timeout_seconds,
            max_running=settings.python_handler_concurrency,
            metrics=metrics,
        ),
        target_delivery(settings, clock, roles=target_roles),
    )


def assumed_roles(
    settings: Settings, clock: Clock, make_client: ClientFactory | None = None
) -> AssumedRoles | None:
    """The roles AWS targets are called and described as, in the stack's region (at
    local mode's emulator, if it names one); None where no region is known.
    ``make_client`` replaces how clients are made (tests authorise each call)."""
    if not settings.target_region:
        return None
    make_client = make_client or client_factory(
        settings.target_region,
        settings.target_endpoint_url,
        settings.http_timeout_seconds,
        settings.worker_concurrency,
    )
    return AssumedRoles(make_client, clock)


def target_delivery(
    settings: Settings,
    clock: Clock,
    make_client: ClientFactory | None = None,
    *,
    roles: AssumedRoles | None = None,
) -> TargetDelivery | None:
    """AWS targets called each as its task's role (``roles``, or ones made as
    ``assumed_roles`` makes them), within the handler timeout; None where no
    region is known."""
    # Not ``or``: roles holding no credentials yet are empty (``len``), not absent.
    if roles is None:
        roles = assumed_roles(settings, clock, make_client)
    return TargetDelivery(roles, settings.http_timeout_seconds) if roles is not None else None


def private_networks_reader(
    settings: Settings, quota_of: Callable[[str], TenantQuota]
) -> PrivateNetworksOf | None:
    """A tenant's private ranges: its grant, within the stack's (decision 0050);
    None when the stack names none (no tenant record is read for them then)."""
    stack = settings.delivery_private_networks
    if not stack:
        return None

    def private_networks_of(tenant_id: str) -> tuple[str, ...]:
        return tenant_private_networks(quota_of(tenant_id).private_networks, stack)

    return private_networks_of

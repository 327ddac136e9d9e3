"""``DynacronScheduler``: the whole scheduler as one construct, for any CDK app."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from dynacron.definitions.environment import API_URL_VAR
from dynacron.definitions.resources import QUEUES, TABLES
from infra.config import SchedulerConfig
from infra.constructs.api import Api
from infra.constructs.completions import CompletionTracking
from infra.constructs.encryption import customer_key, grant_key_use
from infra.constructs.foundation import Foundation
from infra.constructs.functions import HANDLER, FunctionKit, VpcPlacement
from infra.constructs.monitoring import Monitoring
from infra.constructs.queues import Queues
from infra.constructs.storage import Storage
from infra.constructs.tick import Tick
from infra.constructs.undelivered import Undelivered
from infra.constructs.worker import Worker
from infra.layer import LayerAssets


class DynacronScheduler(Construct):
    """Tables, queues, tick, worker and reaper, API, the undelivered queue's reader,
    and monitoring.

    Add it to your own stack; to run your own Python handlers, pass their code as
    ``worker_code`` with a ``worker_handler`` module that imports them and exposes
    ``dynacron.entry.functions.worker`` as its handler (see docs/deploy.md).

    The API gets the same code, so that it knows the handlers' names when a task is
    registered: it imports ``handler_modules`` (default: the ``worker_handler``'s
    module, which imports the handlers) and runs ``dynacron.entry.functions.api`` from the layer.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layers: LayerAssets,
        config: SchedulerConfig | None = None,
        worker_code: lambda_.Code | None = None,
        worker_handler: str = HANDLER,
        handler_modules: Sequence[str] | None = None,
        worker_vpc: VpcPlacement | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        config = config or SchedulerConfig()
        # The worker in the operator's VPC (decision 0050): this prop, else context ids.
        worker_vpc = worker_vpc or VpcPlacement.from_context(self, config)
        if config.private_networks and worker_vpc is None:
            raise ValueError(
                "private_networks needs the worker in your VPC: give worker_vpc_id and "
                "worker_subnet_ids in context, or the worker_vpc prop"
            )
        if handler_modules is None:
            handler_modules = [worker_handler.rsplit(".", 1)[0]] if worker_code else []
        # The operator's own key, or None: AWS's keys (decision 0059).
        key = customer_key(self, config)
        self.storage = Storage(self, "Storage", config=config, key=key)
        self.queues = Queues(self, "Queues", config=config, key=key)
        # Every function is told every resource's name, through the variables the
        # runtime's Settings.from_env reads: names never drift from the code.
        resource_environment = {
            **{t.env_var: self.storage.table(t).table_name for t in TABLES},
            **{q.env_var: self.queues.queue(q).queue_url for q in QUEUES},
        }
        kit = FunctionKit(
            self,
            "Functions",
            config=config,
            layers=layers,
            resource_environment=resource_environment,
            key=key,
        )
        foundation = Foundation(config=config, kit=kit, storage=self.storage, queues=self.queues)
        self.tick = Tick(self, "Tick", foundation=foundation)
        self.worker = Worker(
            self,
            "Worker",
            foundation=foundation,
            worker_code=worker_code,
            worker_handler=worker_handler,
            handler_modules=handler_modules,
            placement=worker_vpc,
        )
        # Tracked Step Functions and ECS runs end their executions (decision 0049).
        self.completions = CompletionTracking(
            self, "Completions", foundation=foundation, reaper=self.worker.reaper
        )
        self.api = Api(
            self, "Api", foundation=foundation, code=worker_code, handler_modules=handler_modules
        )
        # Deliveries name the token-authorised callback URLs on this API (decision
        # 0023). The worker depends on the API's stage, never the other way round.
        self.worker.function.add_environment(API_URL_VAR, self.api.rest_api.url)
        self.undelivered = Undelivered(self, "Undelivered", foundation=foundation)
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            config=config,
            queues=self.queues,
            functions={
                "api": self.api.function,
                "tick": self.tick.function,
                "claim": self.tick.claim_function,
                "worker": self.worker.function,
                "reaper": self.worker.reaper,
                "undelivered": self.undelivered.function,
            },
            api_stage=self.api.rest_api.deployment_stage,
            firewall=self.api.firewall,
        )
        if key is not None:
            # Last: each role's grants are all in place, and decide the key's.
            grant_key_use(key, [c for c in self.node.find_all() if isinstance(c, lambda_.Function)])

"""`dynacron tenants ...`: an operator's limits for one tenant.

Not an API call: a tenant's own credentials must not raise its own limits, so the
operator writes the tenant's record in the store with theirs (deployed: the
coordination table, with the operator's AWS credentials and IAM; local mode: the
SQLite file of ``--data-dir``). The API reads a tenant's task limit on each create
and its rate within 30 s (``quotas.RATE_REFRESH``); ``GET /tenant`` shows both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from dynacron.cli.connection import console, out
from dynacron.definitions.environment import PRIVATE_NETWORKS_VAR
from dynacron.definitions.resources import COORDINATION
from dynacron.domain.coordination.tenants import MAX_TENANT_RATE, MAX_TENANT_TASKS, TenantQuota
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.tasks.urls import check_tenant_grant, parse_private_networks
from dynacron.ports import TenantStore

tenants_app = typer.Typer(help="An operator's limits for one tenant.", no_args_is_help=True)

TableOption = Annotated[
    str | None,
    typer.Option(
        "--coordination-table",
        envvar=COORDINATION.env_var,
        help="The deployment's coordination table (written with your AWS credentials)",
    ),
]
DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        envvar="DYNACRON_DATA_DIR",
        help="Local mode's data directory (its SQLite store), instead of a table",
    ),
]
RegionOption = Annotated[str | None, typer.Option(help="The table's AWS region")]


@contextmanager
def _store(table: str | None, data_dir: Path | None, region: str | None) -> Iterator[TenantStore]:
    if (table is None) == (data_dir is None):
        console.print("Give one of --coordination-table (deployed) or --data-dir (local mode).")
        raise typer.Exit(2)
    if data_dir is not None:
        from dynacron.adapters.sqlite.coordination import SqliteTenantStore
        from dynacron.adapters.sqlite.database import Database
        from dynacron.local.stores import DATABASE_FILE

        if not (data_dir / DATABASE_FILE).exists():
            console.print(f"No local store in {data_dir}: start `dynacron local` there first.")
            raise typer.Exit(1)
        database = Database(data_dir / DATABASE_FILE)
        try:
            yield SqliteTenantStore(database)
        finally:
            database.close()
        return
    import boto3

    from dynacron.adapters.aws.tenants import DynamoTenantStore

    assert table is not None
    yield DynamoTenantStore(boto3.client("dynamodb", region_name=region), table)


def _show(tenant_id: str, store: TenantStore) -> None:
    quota = store.quota(tenant_id)
    shown = {
        "tenant_id": tenant_id,
        "task_count": store.task_count(tenant_id),
        "max_tasks": quota.max_tasks,
        "rate_per_second": quota.rate_per_second,
        "private_networks": list(quota.private_networks),
    }
    out.print_json(json.dumps(shown))


@tenants_app.command("show")
def tenants_show(
    tenant_id: Annotated[str, typer.Argument(help="The tenant (GET /tenant's tenant_id)")],
    coordination_table: TableOption = None,
    data_dir: DataDirOption = None,
    region: RegionOption = None,
) -> None:
    """The tenant's task count and own limits (null: the deployment's default)."""
    with _store(coordination_table, data_dir, region) as store:
        _show(tenant_id, store)


@tenants_app.command("set-limits")
def tenants_set_limits(
    tenant_id: Annotated[str, typer.Argument(help="The tenant (GET /tenant's tenant_id)")],
    max_tasks: Annotated[
        int | None,
        typer.Option(min=1, max=MAX_TENANT_TASKS, help="The most tasks it may hold"),
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=MAX_TENANT_RATE,
            help="Requests a second per API instance (0: no limit)",
        ),
    ] = None,
    default_max_tasks: Annotated[
        bool, typer.Option("--default-max-tasks", help="Back to the deployment's task limit")
    ] = False,
    default_rate: Annotated[
        bool, typer.Option("--default-rate", help="Back to the deployment's rate")
    ] = False,
    private_networks: Annotated[
        str | None,
        typer.Option(
            "--private-networks",
            help="Private CIDRs (comma-separated) its handler URLs may reach, each inside "
            "the stack's --stack-private-networks and no other tenant's; '' removes them",
        ),
    ] = None,
    stack_private_networks: Annotated[
        str,
        typer.Option(
            "--stack-private-networks",
            envvar=PRIVATE_NETWORKS_VAR,
            help="The stack's private networks (its CDK context privateNetworks)",
        ),
    ] = "",
    coordination_table: TableOption = None,
    data_dir: DataDirOption = None,
    region: RegionOption = None,
) -> None:
    """Set the tenant's own limits; a limit not given keeps its current value."""
    if (max_tasks is not None and default_max_tasks) or (rate is not None and default_rate):
        console.print("Give a limit or its --default-… flag, not both.")
        raise typer.Exit(2)
    with _store(coordination_table, data_dir, region) as store:
        current = store.quota(tenant_id)
        grant = current.private_networks
        if private_networks is not None:
            grant = _checked_grant(tenant_id, private_networks, stack_private_networks, store)
        store.set_quota(
            tenant_id,
            TenantQuota(
                max_tasks=None if default_max_tasks else (max_tasks or current.max_tasks),
                rate_per_second=None
                if default_rate
                else (current.rate_per_second if rate is None else rate),
                private_networks=grant,
            ),
        )
        _show(tenant_id, store)


def _checked_grant(tenant_id: str, given: str, stack: str, store: TenantStore) -> tuple[str, ...]:
    """The ranges of ``--private-networks``, refused (exit 2, saying why) unless each
    is private, inside the stack's, and overlapping no other tenant's grant."""
    try:
        stack_networks = parse_private_networks(stack.split(","), field=PRIVATE_NETWORKS_VAR)
        grant = parse_private_networks(given.split(","))
        others = {t: n for t, n in store.private_grants().items() if t != tenant_id}
        return check_tenant_grant(grant, stack_networks, others)
    except InvalidRequest as refused:
        console.print(f"{refused.field}: {refused.message}")
        raise typer.Exit(2) from None

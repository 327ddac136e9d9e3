"""What a bulk import needs of a deployment (``dynacron.planning.imports``, ``dynacron
plan --import-tasks``): ten million tasks in an hour (issue 24), worked out by hand
from the code's batches and transactions and DynamoDB's prices in write units."""

from __future__ import annotations

import json
import math
import re

import pytest
from typer.testing import CliRunner

from dynacron.adapters.aws import tasks as aws_tasks
from dynacron.api.requests import MAX_BATCH
from dynacron.cli.main import app
from dynacron.definitions.resources import TENANT_INDEX_PARTS
from dynacron.entry.settings import Settings
from dynacron.planning.capacity_model import MEASURED
from dynacron.planning.imports import (
    DEFAULT_API_RATE_LIMIT,
    TRANSACTION_PUTS,
    ImportRefused,
    plan_import,
)
from tests.support import ROOT
from tests.unit.test_plan import result

TEN_MILLION = 10_000_000


def test_ten_million_in_an_hour_by_hand() -> None:
    row = plan_import(TEN_MILLION, 1.0, shards=4)
    rate = TEN_MILLION / 3600
    assert row.tasks_per_second == pytest.approx(rate) == pytest.approx(2_777.8, abs=0.1)
    # A batch of 100 is one request to the stage and to the tenant's rate...
    assert row.requests_per_second == pytest.approx(rate / 100)
    assert row.stage_rate_limit == math.ceil(2 * rate / 100) == 56
    assert row.tenant_rate_limit == 56
    # ...and two transactions (99 puts and the count; then 1 and the count)
    assert row.transactions_per_second == pytest.approx(2 * rate / 100)
    # A transactional put of an item under 1 KB: 2 write units; each index entry 1
    assert row.table_write_units == pytest.approx(2 * rate)
    assert row.index_write_units == {
        "tasks/due-index": pytest.approx(rate),
        "tasks/tenant-part-index": pytest.approx(rate),
        "tasks/name-part-index": pytest.approx(rate),
    }
    assert row.coordination_write_units == pytest.approx(2 * 2 * rate / 100)
    assert row.tenant_record_updates == pytest.approx(2 * rate / 100)
    # Partitions: 5,556 units at 500 a partition; the due index over 4 shards if the
    # next runs share an hour; the tenant and name indexes over the tenant's 8 parts
    # (decision 0053), 347 writes a second each: one tenant fits within 500
    assert row.table_partitions == 12
    assert row.due_index_partition_writes == pytest.approx(rate / 4)
    assert row.shards_needed == 6
    assert TENANT_INDEX_PARTS == 8
    assert (
        row.tenant_index_partition_writes
        == pytest.approx(rate / 8)
        == pytest.approx(347.2, abs=0.1)
    )
    assert row.tenants_needed == 1
    # A new on-demand table serves 4,000 write units at first: warm it to 6,000
    assert row.warm_write_units == 6_000
    notes = " ".join(row.notes())
    for said in ("api_rate_limit=56", "--rate 56", "warm throughput to 6,000"):
        assert said in notes
    assert "tenant and name indexes" not in notes


def test_one_tenant_imports_up_to_its_parts_headroom() -> None:
    # 8 parts of 500 writes a second: 4,000 tasks a second, 14.4 million an hour
    assert plan_import(14_400_000, 1.0).tenants_needed == 1
    assert "tenant and name indexes" not in " ".join(plan_import(14_400_000, 1.0).notes())
    beyond = plan_import(20_000_000, 1.0)
    assert beyond.tenant_index_partition_writes == pytest.approx(20_000_000 / 3600 / 8)
    assert beyond.tenants_needed == 2
    notes = " ".join(beyond.notes())
    assert "8 partitions of each" in notes
    assert "2 tenants or more, or give it 1.4 hours" in notes


def test_spread_over_tenants_and_shards_the_import_needs_no_partition_change() -> None:
    row = plan_import(TEN_MILLION, 1.0, tenants=6, shards=6)
    assert row.tenant_index_partition_writes <= 500
    assert row.due_index_partition_writes <= 500
    notes = " ".join(row.notes())
    assert "tenant and name indexes" not in notes
    assert "due index" not in notes
    # Each tenant's own rate: a sixth of the batches
    assert row.tenant_rate_limit == max(20, math.ceil(2 * TEN_MILLION / 3600 / 100 / 6))
    # Slowly enough, nothing needs setting at all
    assert plan_import(100_000, 10.0).notes() == []


def test_an_import_with_nothing_to_do_is_refused() -> None:
    for tasks, hours in ((0, 1.0), (10, 0.0)):
        with pytest.raises(ImportRefused):
            plan_import(tasks, hours)
    with pytest.raises(ImportRefused, match="1 to 100"):
        plan_import(10, 1.0, batch_size=101)


def test_the_import_planners_figures_are_the_codes_and_the_benchmarks() -> None:
    from infra.config import SchedulerConfig

    # The adapter's transactions, the API's batch, the stack's stage, the tenants' rate
    assert TRANSACTION_PUTS == aws_tasks._CHUNK_PUTS
    assert MAX_BATCH == 100
    assert SchedulerConfig().api_rate_limit == DEFAULT_API_RATE_LIMIT
    assert Settings.tenant_rate_per_second == 20
    # The bytes a task's item and its index entries take (the cost benchmark's)
    stored = result("cost")["at_rest"]
    assert MEASURED.task_item_bytes == stored["task_item_bytes"] < 1024
    assert MEASURED.task_index_bytes == stored["task_index_bytes"] < 2 * 1024


def test_plan_sizes_an_import_on_the_command_line() -> None:
    runner = CliRunner()
    printed = runner.invoke(
        app, ["plan", "--import-tasks", "10000000", "--import-hours", "1", "--current-shards", "4"]
    )
    assert printed.exit_code == 0, printed.output
    assert "api_rate_limit=56" in printed.output
    assert "tenants or more" not in printed.output
    as_json = runner.invoke(app, ["plan", "--import-tasks", "10000000", "--json"])
    body = json.loads(as_json.output)
    # The deployment's shards: --current-shards, 1 unless given
    one_shard = plan_import(TEN_MILLION, 1.0, shards=1)
    assert body["shards"] == 1
    assert body["warm_write_units"] == one_shard.warm_write_units
    assert body["notes"] == one_shard.notes()
    neither = runner.invoke(app, ["plan"])
    assert neither.exit_code == 2
    assert "--fires-per-second" in neither.output


def test_the_docs_import_section_is_the_planners() -> None:
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    section = deploy[deploy.index("### Importing ten million tasks") :]
    section = " ".join(section[: section.index("\n## ")].split())
    row = plan_import(TEN_MILLION, 1.0, shards=4)
    for figure in (
        f"{row.tasks_per_second:,.0f} tasks a second",
        f"api_rate_limit={row.stage_rate_limit}",
        f"--rate {row.tenant_rate_limit}",
        f"{row.table_write_units:,.0f} write units a second",
        f"{row.warm_write_units:,} write units",
        f"{row.table_partitions} partitions",
        f"{row.tenant_index_partition_writes:,.0f} writes a second",
        f"{TENANT_INDEX_PARTS} partitions",
        f"{row.shards_needed} shards",
    ):
        assert figure in section, figure
    assert re.search(r"dynacron plan --import-tasks 10000000 --import-hours 1", section)

"""Finding one task among many (issue 24, decision 0045): ``GET /tasks?name_prefix=``
and a tag filter in local mode, over HTTP, with N tasks on SQLite; and what a page
of the name index costs on DynamoDB, metered on moto as AWS bills it.

Local mode runs its API only (no tick, no workers): the figure is the lookup's, on
an otherwise idle store. The tasks are registered through the service's batch
create (``register_many``, as ``POST /tasks/batch``), in chunks of 1,000, under a
tenant quota raised for the run. Each lookup is timed as a client sees it (one
HTTP request on loopback, answer read), the median and the worst of ``REPEATS``.

Run: .venv/bin/python -m bench.lookup [--sizes 100000,1000000]
``lookup_figures()`` returns the figures for ``make bench``'s report.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from dynacron.adapters.sqlite.tasks import _tags_condition
from dynacron.api.requests import TaskCreate
from dynacron.domain.coordination.tenants import DEFAULT_TENANT, TenantQuota
from dynacron.domain.tasks.tags import parse_tag_filter
from dynacron.local.runtime import LocalOptions, LocalRuntime
from dynacron.local.stores import DATABASE_FILE
from dynacron.services.tasks import BatchItem

SIZES = (100_000, 1_000_000)
QUICK_SIZES = (10_000, 100_000)
CHUNK = 1000
REPEATS = 7
HOOK = "http://127.0.0.1:9/hook"
# One task in ten carries the common tag, one in the whole set the rare one.
COMMON_EVERY = 10


def _spec(n: int) -> Any:
    tags = {"team": "common"} if n % COMMON_EVERY == 0 else {}
    return TaskCreate.model_validate(
        {"name": f"job-{n:08d}", "rate": "1 day", "handler_url": HOOK, "tags": tags}
    ).to_spec()


def _seed(runtime: LocalRuntime, size: int) -> float:
    """``size`` tasks, the last named ``Needle`` and tagged rarely; tasks a second."""
    app = runtime.app
    assert app is not None
    service = app.task_service
    service.set_quota(DEFAULT_TENANT, TenantQuota(max_tasks=size + 10))
    began = time.perf_counter()
    for start in range(0, size - 1, CHUNK):
        items = [BatchItem(_spec(n)) for n in range(start, min(start + CHUNK, size - 1))]
        outcomes = service.register_many(DEFAULT_TENANT, items)
        refused = [o.error for o in outcomes if o.error is not None]
        if refused:
            raise RuntimeError(f"the seed was refused: {refused[0]}")
    needle = TaskCreate.model_validate(
        {
            "name": "Needle in the stack",
            "rate": "1 day",
            "handler_url": HOOK,
            "tags": {"team": "rare"},
        }
    ).to_spec()
    service.register_many(DEFAULT_TENANT, [BatchItem(needle)])
    return size / (time.perf_counter() - began)


def _timed(client: httpx.Client, url: str, params: dict[str, str]) -> dict[str, Any]:
    """Median and worst seconds of ``REPEATS`` requests, and what the last one found."""
    seconds = []
    found: list[str] = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        response = client.get(url, params=params)
        seconds.append(time.perf_counter() - began)
        response.raise_for_status()
        found = [task["name"] for task in response.json()["items"]]
    return {
        "median_s": round(statistics.median(seconds), 4),
        "max_s": round(max(seconds), 4),
        "found": len(found),
        "first": found[0] if found else None,
    }


def _whole_tenant_tag_scan(data_dir: Path) -> dict[str, Any]:
    """The rare tag found as ``GET /tasks?tag=`` found it before decision 0045: the
    tenant's tasks in creation order, each record's tags read, on the same file."""
    where, parameters = _tags_condition((parse_tag_filter("team:rare"),)) or ("1", ())
    query = (
        "SELECT task_id FROM tasks WHERE tenant_id = ? AND "
        f"({where}) ORDER BY created_at, task_id LIMIT 51"
    )
    connection = sqlite3.connect(data_dir / DATABASE_FILE)
    seconds = []
    try:
        for _ in range(3):
            began = time.perf_counter()
            found = connection.execute(query, (DEFAULT_TENANT, *parameters)).fetchall()
            seconds.append(time.perf_counter() - began)
    finally:
        connection.close()
    return {
        "median_s": round(statistics.median(seconds), 4),
        "max_s": round(max(seconds), 4),
        "found": len(found),
    }


def local_lookup(size: int) -> dict[str, Any]:
    """The lookups of one local mode holding ``size`` tasks."""
    with tempfile.TemporaryDirectory() as data_dir:
        runtime = LocalRuntime(
            LocalOptions(port=0, data_dir=Path(data_dir), components=("api",))
        ).start()
        try:
            rate = _seed(runtime, size)
            url = f"{runtime.api_url}/tasks"
            with httpx.Client(timeout=60, trust_env=False) as client:
                lookups = {
                    "name_prefix": _timed(client, url, {"name_prefix": "needle", "limit": "50"}),
                    "name_prefix_many": _timed(
                        client, url, {"name_prefix": "JOB-00001", "limit": "50"}
                    ),
                    "tag_rare": _timed(client, url, {"tag": "team:rare", "limit": "50"}),
                    "tag_common": _timed(client, url, {"tag": "team:common", "limit": "50"}),
                    "sort_name": _timed(client, url, {"sort": "name", "limit": "50"}),
                    "sort_next_run": _timed(client, url, {"sort": "next_run_at", "limit": "50"}),
                    "first_page": _timed(client, url, {"limit": "50"}),
                }
            # Side by side, in the same run: the same rare tag read the old way
            lookups["tag_rare_whole_tenant_before"] = _whole_tenant_tag_scan(Path(data_dir))
        finally:
            runtime.stop()
    assert lookups["name_prefix"]["first"] == "Needle in the stack", lookups
    assert lookups["tag_rare"]["first"] == "Needle in the stack", lookups
    return {"tasks": size, "seeded_per_second": round(rate), "lookups": lookups}


def dynamodb_page_cost(page_size: int = 50) -> dict[str, Any]:
    """One page of ``GET /tasks?name_prefix=`` on moto, metered: the keys-only name
    index's Query, then the page's items in one eventually consistent BatchGetItem."""
    from bench.cost import fresh_bench, register
    from bench.loopback import Sink
    from bench.meter import summarise
    from dynacron.domain.tasks.listing import TaskListing

    sink = Sink().start()
    try:
        with fresh_bench(sink) as bench:
            register(bench, page_size, rate="1 minute")
            bench.meter.reset()
            # Every task is named bench-<n>: one prefix finds the page's worth
            by_name = TaskListing(name_prefix="BENCH-")
            page = bench.app.task_service.page(DEFAULT_TENANT, page_size, None, (), by_name)
            per_page = summarise(bench.meter.reset(), fires=1)["per_fire"]
    finally:
        sink.stop()
    return {"page_size": page_size, "found": len(page.items), "per_page": per_page}


def lookup_figures(sizes: Sequence[int] = SIZES) -> dict[str, Any]:
    """Every figure of this benchmark, as ``make bench`` records them."""
    return {
        "local": [local_lookup(size) for size in sizes],
        "dynamodb_page": dynamodb_page_cost(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--out", type=Path, default=None)
    arguments = parser.parse_args()
    figures = lookup_figures([int(size) for size in arguments.sizes.split(",")])
    text = json.dumps(figures, indent=2)
    print(text)
    if arguments.out is not None:
        arguments.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

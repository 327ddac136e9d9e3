"""Regenerates BENCHMARKS.md and its plots from bench/results/*.json.

Run: .venv/bin/python -m bench.report
"""

from __future__ import annotations

import json
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.common import RESULTS

ROOT = RESULTS.parent.parent
OUT = ROOT / "BENCHMARKS.md"
PLOTS = "bench/results"


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def verdict(met: bool) -> str:
    return "**met**" if met else "**not met**"


def context_line(result: dict[str, Any]) -> str:
    if "versions" not in result:
        return f"_Run {result.get('date')} by an earlier version of the benchmark._"
    machine = result["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in result["versions"].items() if v)
    load = " / ".join(str(x) for x in result["load_average"])
    quick = " (BENCH_QUICK)" if result.get("quick") else ""
    return (
        f"_Run {result['date']}{quick} on {machine['platform']}, {machine['cpus']} CPUs, "
        f"Python {machine['python']}; {versions}; load average (1/5/15 min) {load} "
        "at the end of the run._"
    )


def table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def save(figure: Any, name: str) -> str:
    figure.tight_layout()
    figure.savefig(RESULTS / name, dpi=110)
    plt.close(figure)
    return f"![{name}]({PLOTS}/{name})"


def cost_section(result: dict[str, Any]) -> list[str]:
    scenarios = result["scenarios"]
    goal = result["write_unit_goal_per_recurring_fire"]
    recurring = next(s for s in scenarios if s["kind"] == "recurring" and s["batch"] > 1)
    units = recurring["per_fire"]["write_units"]
    # The tick's own writes (its shard's heartbeat and cursor) are paid whether or not
    # anything fires (the idle cost below); the goal is about what a fire adds.
    tick_units = sum(
        b["wcu"] + b["index_wcu"]
        for b in recurring["breakdown"]
        if b["caller"].startswith("CursorStore.")
    )
    fire_units = round(units - tick_units, 4)
    rows = [
        [
            s["kind"],
            s["batch"],
            s["per_fire"]["write_units"],
            s["per_fire"]["rcu"],
            s["per_fire"]["dynamodb_requests"],
            s["per_fire"]["sqs_requests"],
            s["usd_per_million_fires"]["total_on_demand"],
            s["usd_per_million_fires"]["total_provisioned"],
        ]
        for s in scenarios
    ]
    breakdown = [
        [
            b["service"],
            b["caller"],
            b["operation"],
            b["requests"],
            b["wcu"],
            b["index_wcu"],
            b["rcu"],
        ]
        for b in recurring["breakdown"]
    ]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    writers = [b for b in recurring["breakdown"] if b["wcu"] or b["index_wcu"]]
    bottom = 0.0
    for b in writers:
        name = f"{b['caller']} {b['operation']}"
        for label, value in ((name, b["wcu"]), (name + " (index)", b["index_wcu"])):
            if value:
                left.bar(["recurring fire"], [value], bottom=[bottom], label=label)
                bottom += value
    left.axhline(goal, color="red", linestyle="--", label=f"goal {goal}")
    left.set_ylabel("write units per fire")
    left.set_title("Where each write unit goes")
    left.legend(fontsize=7)
    names = [f"{s['kind']}\nx{s['batch']}" for s in scenarios]
    right.bar(
        names, [s["usd_per_million_fires"]["total_on_demand"] for s in scenarios], label="on-demand"
    )
    right.bar(
        names,
        [s["usd_per_million_fires"]["total_provisioned"] for s in scenarios],
        width=0.4,
        label="provisioned (70 % utilised)",
    )
    right.axhline(1.0, color="black", linestyle=":", label="EventBridge Scheduler $1.00")
    right.set_ylabel("USD per million fires")
    right.set_title("Cost per million fires (DynamoDB + SQS + Lambda requests)")
    right.legend(fontsize=7)
    right.tick_params(axis="x", labelsize=7)
    image = save(figure, "cost.png")
    idle = result["idle_shard"]
    idle_second = idle["per_shard_second"]
    idle_rows = [
        [b["service"], b["caller"], b["operation"], b["requests"], b["wcu"], b["rcu"]]
        for b in idle["breakdown"]
    ]
    prices = result["prices_usd"]
    return [
        "## 1. Cost per fire",
        "",
        context_line(result),
        "",
        "Every AWS request of a real tick and worker, counted by a botocore event hook on the "
        "clients (`bench/meter.py`); capacity units by AWS's documented rules from the item "
        "images before and after each write (moto answers `ReturnConsumedCapacity` with a "
        "constant): 1 WCU per started KB of the larger image, a failed conditional write still "
        "costs it; a global secondary index entry is written whenever a write changes any "
        "attribute projected into it (one write; a moved key a delete plus a put), following "
        "the projections in `dynacron/definitions/resources.py`; consistent reads "
        "1 RCU per 4 KB per item, queries 0.5 RCU per 4 KB returned, SQS 1 request per 64 KB. "
        "The worker is driven as Lambda's SQS event source mapping drives it (receive 10, invoke, "
        "delete), whose requests are billed too. `retried` = each execution's first call fails and "
        "the worker's retry succeeds (two attempts); `duplicate` = the message is "
        "redelivered after success.",
        "",
        f"Goal: at most {goal} write units per recurring fire including history and "
        f"idempotency: {fire_units} → {verdict(fire_units <= goal)} ({units} with the "
        f"share of the tick's own heartbeat, {round(tick_units, 4)}, which an idle shard "
        "pays too). Until issue 13 the tenant index projected all attributes, so each claim "
        "also rewrote the task's entry there: 6 write units a fire, which the meter of the "
        "time (counting index writes only when an index key moved) reported as 5. "
        "The execution item is both the "
        "history and the Powertools idempotency record (docs/decisions/0016), and a running "
        "attempt's lease is guarded by its SQS message rather than the lease index "
        "(docs/decisions/0015).",
        "",
        table(
            [
                "fire",
                "fires per tick",
                "write units",
                "read units",
                "DynamoDB requests",
                "SQS requests",
                "USD/M on-demand",
                "USD/M provisioned",
            ],
            rows,
        ),
        "",
        "Where each unit of a recurring fire goes (per fire, 100 fires per tick):",
        "",
        table(["service", "caller", "operation", "requests", "WCU", "index WCU", "RCU"], breakdown),
        "",
        image,
        "",
        "Prices (us-east-1, USD): DynamoDB on-demand "
        f"{prices['dynamodb_on_demand_per_million_write_units']} per million write units and "
        f"{prices['dynamodb_on_demand_per_million_read_units']} per million read units; "
        f"provisioned {prices['dynamodb_provisioned_per_wcu_hour']} per WCU-hour and "
        f"{prices['dynamodb_provisioned_per_rcu_hour']} per RCU-hour at "
        f"{int(prices['provisioned_utilisation'] * 100)} % utilisation; SQS "
        f"{prices['sqs_standard_per_million_requests']} per million requests; Lambda "
        f"{prices['lambda_per_million_requests']} per million requests (worker invocations, batch "
        "of 10; duration and storage left out); EventBridge Scheduler "
        f"{prices['eventbridge_scheduler_per_million_invocations']} per million invocations.",
        "",
        "Fixed cost of an idle shard, metered on its looping tick as deployed "
        f"({int(idle['simulated_seconds'])} simulated seconds: a new invocation each minute, "
        f"{int(idle['tick_arrival_offset_seconds'])} s into it, standing by until the holder "
        f"hands it the lease at the holder's deadline, decision 0036): "
        f"{idle_second['dynamodb_requests']} DynamoDB requests, "
        f"{idle_second['rcu']} read units (the standbys' lease reads among them), "
        f"{idle_second['write_units']} write units (heartbeats, "
        f"lease renewals, handovers) and {idle_second['sqs_requests']} SQS requests "
        "(the dispatch queue's depth, read by every tick) per shard-second: "
        f"${idle['usd_per_shard_month_requests']} per shard-month on demand. Each invocation "
        f"is billed {max(idle['billed_seconds_per_invocation'])} s (a minute standing by, a "
        "minute holding the shard, the overlap); its Lambda cost, with the template's memory, "
        "is in docs/deploy.md (Idle cost), generated by `python -m bench.idle_cost`.",
        "",
        table(["service", "caller", "operation", "requests", "WCU", "RCU"], idle_rows),
        "",
        *listing_lines(result.get("listing")),
    ]


def listing_lines(page: dict[str, Any] | None) -> list[str]:
    if page is None:
        return []
    keys_only = page["keys_only"]
    return [
        f"A page of `GET /tasks` ({page['page_size']} tasks): {keys_only['dynamodb_requests']} "
        f"requests and {keys_only['rcu']} read units (a Query of the tenant index, which "
        "projects keys and tags only, then an eventually consistent BatchGetItem of the page), "
        f"against {page['all_attributes_rcu']} read units from an index projecting all "
        "attributes. That projection cost every claim one more index write (tags never change "
        "on a fire, so projecting them costs a claim nothing), so the narrow index is "
        f"cheaper as long as a tenant's tasks fire {page['claims_paying_for_one_page']} times "
        "or more for each page listed.",
        "",
    ]


def scaling_section(result: dict[str, Any]) -> list[str]:
    runs = result["runs"]
    ratio = result["items_read_ratio_largest_to_smallest"]
    rows = [
        [
            r["registered"],
            r["due"],
            r["items_read"],
            r["read_units"],
            r["requests"],
            r["emulator_tick_seconds"],
        ]
        for r in runs
    ]
    figure, axis = plt.subplots(figsize=(6, 4))
    registered = [r["registered"] for r in runs]
    axis.plot(registered, [r["items_read"] for r in runs], marker="o", label="dynacron tick")
    axis.plot(
        registered, [r["registered"] for r in runs], linestyle="--", label="a Scan would read"
    )
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("registered tasks (100 due)")
    axis.set_ylabel("items read per tick")
    axis.legend()
    image = save(figure, "scaling.png")
    return [
        "## 2. Scan-free scaling",
        "",
        context_line(result),
        "",
        f"Items read by one tick of all {result['shards']} shards (due-index pages, strongly "
        "consistent re-reads, cursors), with 100 tasks due and the rest pending in the same shards "
        "and buckets, later in the sort key, up to a week ahead. Ratio largest/smallest: "
        f"**{ratio}** (goal ≤ {result['goal_ratio']}: {verdict(ratio <= result['goal_ratio'])}). "
        "The emulator's wall time grows because moto filters an index in Python over every item; "
        "DynamoDB reads only the key range.",
        "",
        table(["registered", "due", "items read", "read units", "requests", "moto seconds"], rows),
        "",
        image,
        "",
    ]


def lateness_verdict(run: dict[str, Any], goals: dict[str, dict[str, float]]) -> str:
    goal = goals.get(str(run["target_fires_per_second"]))
    if run.get("store", "emulator") != "sqlite" or goal is None:
        return ""
    lateness = run["lateness_seconds"]
    return (
        verdict(all(lateness[q] <= limit for q, limit in goal.items()))
        + " ("
        + ", ".join(f"{q} ≤ {limit}" for q, limit in goal.items())
        + ")"
    )


def lateness_section(result: dict[str, Any]) -> list[str]:
    runs = result["runs"]
    goals = result.get("goals", {})
    rows = [
        [
            r.get("store", "emulator"),
            r["target_fires_per_second"],
            r["seconds"],
            r["scheduled"],
            r["unique_executions"],
            *(r["lateness_seconds"][q] for q in ("p50", "p95", "p99", "max")),
            lateness_verdict(r, goals),
        ]
        for r in runs
    ]
    figure, axis = plt.subplots(figsize=(6, 4))
    for r in runs:
        samples = r.get("lateness_samples") or []
        if samples:
            axis.plot(
                samples,
                [i / len(samples) for i in range(1, len(samples) + 1)],
                label=f"{r.get('store', 'emulator')} {r['target_fires_per_second']}/s",
            )
    axis.set_xscale("log")
    axis.set_xlabel("lateness (handler start - scheduled), seconds (log)")
    axis.set_ylabel("fraction of fires")
    axis.set_title("Local mode lateness, cumulative")
    axis.legend()
    image = save(figure, "lateness.png")
    return [
        "## 3. Lateness in local mode",
        "",
        context_line(result),
        "",
        "`dynacron local` in its own process (API, tick of every shard, "
        f"{result['workers']} workers, reaper), on SQLite in a fresh data directory (ticks "
        "every 0.05 s) or on the AWS emulator (ticks at the top of each second, so about "
        "0.5 s of lateness is by design there); one-time tasks registered ahead and due "
        "evenly at the target rate, delivered to a minimal asyncio loopback handler "
        "(`bench/loopback.py`); lateness = the handler's receive time minus the scheduled "
        "time. The emulator rows stop at the rates it can carry.",
        "",
        table(
            [
                "store",
                "fires/s",
                "seconds",
                "scheduled",
                "delivered (unique)",
                "p50",
                "p95",
                "p99",
                "max",
                "goal",
            ],
            rows,
        ),
        "",
        image,
        "",
    ]


def throughput_section(result: dict[str, Any]) -> list[str]:
    runs = result["runs"]
    goal = result["goal_claims_per_second_per_shard"]
    target = result["target_fires_per_second"]
    simulation = result["latency_simulation"]
    check = result["double_checked_against_moto"]

    def rate(r: dict[str, Any]) -> str:
        low, high = r["claims_per_second_range"]
        spread = f" ({low}-{high})" if r["repeats"] > 1 else ""
        return f"{r['claims_per_second']}{spread}"

    rows = [
        [
            r["simulation"],
            r["tick_concurrency"],
            r["latency_ms"],
            r["claimed"],
            r["repeats"],
            r["seconds"],
            rate(r),
            r["latency_bound_claims_per_second"] or "",
            r["cpu_ms_per_claim"],
            r["tick_cpu_ms_per_claim"] if r["tick_cpu_ms_per_claim"] is not None else "",
            r["requests_per_claim"] or "",
            r["shards_for_10k_fires_per_second"],
        ]
        for r in runs
    ]
    doubled = [r for r in runs if r["simulation"] == "double" and r["latency_ms"] == 10]
    best = max(doubled, key=lambda r: r["claims_per_second"])
    idle = next(r for r in runs if r["simulation"] == "double" and r["latency_ms"] == 0)
    moto_best = max(
        r["claims_per_second"] for r in runs if r["simulation"] == "moto" and r["latency_ms"] == 10
    )
    figure, axis = plt.subplots(figsize=(7, 4.5))
    threads = [r["tick_concurrency"] for r in doubled]
    axis.errorbar(
        threads,
        [r["claims_per_second"] for r in doubled],
        yerr=[
            [r["claims_per_second"] - r["claims_per_second_range"][0] for r in doubled],
            [r["claims_per_second_range"][1] - r["claims_per_second"] for r in doubled],
        ],
        marker="o",
        capsize=3,
        label="tick + AWS double, 10 ms per call",
    )
    axis.plot(
        threads,
        [r["latency_bound_claims_per_second"] for r in doubled],
        linestyle="--",
        color="grey",
        label="latency alone (CPU free)",
    )
    axis.axhline(
        idle["claims_per_second"],
        linestyle=":",
        color="purple",
        label="CPU alone (double, 0 ms)",
    )
    moto = [r for r in runs if r["simulation"] == "moto" and r["latency_ms"] == 10]
    axis.plot(
        [r["tick_concurrency"] for r in moto],
        [r["claims_per_second"] for r in moto],
        marker="s",
        label="tick + in-process moto, 10 ms per call",
    )
    axis.axhline(goal, color="red", linestyle="--", label=f"goal {goal}/s")
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xticks(threads, [str(t) for t in threads])
    axis.set_xlabel("tick_concurrency (threads)")
    axis.set_ylabel("claims per second, one shard")
    axis.set_title("Tick throughput per shard")
    axis.legend(fontsize=7)
    image = save(figure, "throughput.png")
    shards = best["shards_for_10k_fires_per_second"]
    return [
        "## 4. Tick throughput per shard",
        "",
        context_line(result),
        "",
        "One shard holds every task, all due; one `Ticker.tick_shard` (the real tick, with its "
        "pool of `tick_concurrency` threads and real boto3 clients) claims and sends them; "
        "claims/s = tasks / wall time of the tick, median of the repeats (range in brackets), "
        "fresh tables each time. Two simulations of the 10 ms per call:",
        "",
        f"- **{simulation['double']}** (`bench/aws_double.py`). botocore still validates, "
        "serialises and signs each request and parses each answer, so the tick pays its real "
        "client CPU; only the network and the service are replaced. The model is what a tick "
        "touches: Query on the due index in sort-key order with `Limit` and "
        "`LastEvaluatedKey`, consistent BatchGetItem, GetItem, PutItem and UpdateItem with real "
        "condition checks (`ConditionalCheckFailedException`), SendMessageBatch, "
        "GetQueueAttributes; anything else fails the run. Its own work (about 0.2 ms of CPU "
        "per call) is taken out of the 10 ms wait, as a real service's is part of the round "
        "trip, but it still holds the GIL, so it slightly slows the tick.",
        f"- **{simulation['moto']}**. moto spends some 20 ms of CPU per call here, under the "
        "GIL, so these rows measure the emulator (the 0 ms row is no faster); kept for comparison.",
        "",
        f"Checked before measuring: the same tick over the same {check['tasks']} tasks (on "
        "time, in an older bucket, one-time, run_all catch-up, overlap skip, fixed delay, "
        "catch-up skip, not yet due; pages of 7, 4 threads) against moto and against the double "
        f"claims the same {check['claimed']} occurrences, sends the same {check['messages']} "
        f"messages, records the same {check['skipped_executions']} SKIPPED executions, moves "
        "the cursor alike, refuses a stale claim in both, and leaves every item equal "
        f"(`identical`: {check['identical']}; also `tests/integration/test_aws_double.py`).",
        "",
        f"Best with 10 ms per call: **{best['claims_per_second']} claims/s** at "
        f"`tick_concurrency` {best['tick_concurrency']} (goal ≥ {goal}: "
        f"{verdict(best['claims_per_second'] >= goal)}), so **{shards} shards** for "
        f"{target:,} fires/s on this machine's CPU. Against moto the best was {moto_best}/s.",
        "",
        "How to read it: `latency bound` is what the page structure allows if the CPU were "
        "free (per page of 100: one Query, then one BatchGetItem, then the sends, then the "
        "claims, each group waiting for the one before and issued `tick_concurrency` calls at "
        "a time). `CPU ms/claim` is `time.process_time` over the tick divided by the claims; "
        "the tick's own leaves out the double's model. Python runs all of it on one core (the "
        f"GIL): at {best['cpu_ms_per_claim']} ms per claim one core allows about "
        f"{round(1000 / best['cpu_ms_per_claim'])} claims/s, and with no latency at all the "
        f"tick reached {idle['claims_per_second']}/s. So from some 16 threads on, more threads "
        "do not help: a page costs its CPU plus the Query, BatchGetItem and send round trips "
        "that nothing overlaps. A profile (cProfile, one thread, no latency) puts about 83 % "
        "of the tick's own CPU in botocore (validating, serialising and signing each request, "
        "parsing each answer, its event hooks) and 5 % in reading task items; "
        "the HTTP and TLS work of a real connection is not in these figures, so a deployed "
        "tick spends somewhat more per claim.",
        "",
        table(
            [
                "simulation",
                "tick_concurrency",
                "latency ms",
                "claimed",
                "repeats",
                "seconds",
                "claims/s",
                "latency bound",
                "CPU ms/claim",
                "tick's own CPU ms/claim",
                "requests/claim",
                f"shards for {target}/s",
            ],
            rows,
        ),
        "",
        image,
        "",
    ]


def capacity_section(result: dict[str, Any]) -> list[str]:
    cpu_rows = [
        [
            r["tick_concurrency"],
            r["claimed"],
            r["tick_cpu_ms_per_claim"],
            r.get("tick_cpu_ms_per_claim_range", ""),
            r["claims_per_second"],
        ]
        for r in result["cpu_per_claim"]
    ]
    limited = result["limited"]
    measured = {r["memory_mb"]: r for r in limited["rows"]}
    against_moto = limited.get("against_moto") or {}
    over_http = result.get("limited_over_http") or {"rows": [], "possible": False}
    served = {r["memory_mb"]: r for r in over_http["rows"]}
    latency = result["assumed_latency_ms"]
    rows = []
    for d in result["derived"]:
        memory = d["memory_mb"]
        row = measured.get(memory)
        moto = against_moto if against_moto.get("memory_mb") == memory else None
        rows.append(
            [
                f"{memory:,}",
                d["cpu_share"],
                d["cpu_bound_claims_per_second"],
                d["claims_per_second"],
                d.get("plan_claims_per_second", ""),
                served[memory]["claims_per_second"] if memory in served else "",
                row["claims_per_second"] if row else "",
                moto["claims_per_second"] if moto else "",
            ]
        )
    figure, axis = plt.subplots(figsize=(6, 4))
    memories = [d["memory_mb"] for d in result["derived"]]
    axis.plot(
        memories,
        [d.get("plan_claims_per_second", d["claims_per_second"]) for d in result["derived"]],
        marker="o",
        label=f"derived (plan: {result['model_tick_cpu_ms_per_claim']} ms CPU per claim)",
    )
    if over_http["rows"]:
        axis.plot(
            [r["memory_mb"] for r in over_http["rows"]],
            [r["claims_per_second"] for r in over_http["rows"]],
            marker="D",
            label="measured under a cgroup quota (double over HTTP, own process)",
        )
    if limited["rows"]:
        axis.plot(
            [r["memory_mb"] for r in limited["rows"]],
            [r["claims_per_second"] for r in limited["rows"]],
            marker="s",
            linestyle=":",
            label="measured under a cgroup quota (double in process)",
        )
    if against_moto:
        axis.plot(
            [against_moto["memory_mb"]],
            [against_moto["claims_per_second"]],
            marker="^",
            linestyle="",
            label="measured under a cgroup quota (moto, own process)",
        )
    axis.set_xlabel("tick memory (MB); 1,769 MB = one vCPU")
    axis.set_ylabel("claims per second, one shard")
    axis.set_title("Tick capacity per shard by Lambda memory")
    axis.legend(fontsize=7)
    image = save(figure, "capacity.png")
    unlimited = limited["unlimited"]
    if limited["possible"]:
        how = (
            f"cgroup {limited['cgroup']} CPU quota (period {limited['cfs_period_us']} µs), "
            f"AWS double at {limited['latency_ms']} ms per call; the double's model used "
            f"{round(100 * unlimited['model_share_of_cpu'])} % of the process's CPU unlimited, "
            "so each quota is raised by that much and the tick's own code gets the Lambda's share"
        )
    else:
        how = f"not possible on this machine: {limited['why_not']}"
    return [
        "## 7. Tick capacity by Lambda memory",
        "",
        context_line(result),
        "",
        "The tick's own CPU per claim, with the AWS stand-in in another process: the embedded "
        "AWS (moto in server mode) runs as a child process on a loopback port, the real tick "
        "claims every due task of one shard through real boto3 clients over HTTP, and "
        "`resource.getrusage` counts this process's CPU (every thread) around the ticks. moto's "
        "CPU is not in it; TLS is not either. The wall time is moto's pace, not the tick's.",
        "",
        table(
            [
                "tick_concurrency",
                "claimed",
                "tick CPU ms/claim",
                "range of repeats",
                "claims/s (moto's pace)",
            ],
            cpu_rows,
        ),
        "",
        "Claims/s of one shard at Lambda's CPU share (memory / 1,769 MB, one thread: the GIL). "
        "**Derived** = `dynacron.planning.capacity_model.TickModel` (what `dynacron plan` uses): "
        "a page of 100 costs its CPU at that share (tick CPU per claim: this run's median "
        f"above, and the {result['model_tick_cpu_ms_per_claim']} ms the plan holds) "
        "plus the round trips nothing overlaps "
        f"(Query, BatchGetItem, sends; DynamoDB {latency['dynamodb']} ms and SQS "
        f"{latency['sqs']} ms a call, what section 4 simulated), the claims' round trips "
        f"overlapping the CPU ({result['default_tick_concurrency']} threads). **Measured**: {how}. "
        "Three stand-ins: **double over HTTP** = the same double served on a loopback port "
        "by its own process (a threaded `http.server`, keep-alive, answering 10 ms after each "
        "request arrived), so the tick pays its real client and HTTP CPU and nothing of the "
        "stand-in's (unlimited it made "
        f"{over_http.get('unlimited', {}).get('claims_per_second', '-')} claims/s at "
        f"{over_http.get('unlimited', {}).get('tick_cpu_ms_per_claim', '-')} ms of tick CPU "
        "per claim, the server's pace on this shared machine); **double in process** answers "
        "at botocore's `before-send`, leaving out sockets and HTTP parsing, so it sits above "
        "the rest; **moto** (smallest memory only, where the CPU share and not moto sets the "
        "pace) carries real HTTP to the emulator in its own process.",
        "",
        table(
            [
                "memory MB",
                "CPU share",
                "CPU bound claims/s",
                "derived (this run)",
                f"derived (plan, {result['model_tick_cpu_ms_per_claim']} ms)",
                "measured (double over HTTP)",
                "measured (double in process)",
                "measured (moto)",
            ],
            rows,
        ),
        "",
        image,
        "",
        *fanout_lines(load("fanout")),
        "Sizing for a rate of fires (shards, memory, workers, DynamoDB mode, monthly cost) is "
        "`dynacron plan --fires-per-second N`; the table for 10 to 10,000 fires/s is in "
        'docs/deploy.md, "Sizing".',
        "",
    ]


def fanout_lines(result: dict[str, Any] | None) -> list[str]:
    """Elastic capacity (decision 0025): how fast a 128 MB looping tick hands pages out."""
    if result is None:
        return ["Elastic capacity: not run in this pass (`.venv/bin/python -m bench.fanout`).", ""]
    limited = result["limited"]
    model = result["model"]
    claims = result.get("claim_invocation_claims_per_second")
    rows = [
        [
            "unlimited",
            result["unlimited"][0]["pages"],
            f"{result['hand_out_cpu_ms_per_page']:.2f}",
            "",
            "",
        ]
    ]
    if "pages_per_second" in limited:
        rows.append(
            [
                f"{limited['memory_mb']} MB (CPU share {limited['cpu_share']:.4f})",
                limited["pages"],
                "",
                f"{limited['pages_per_second']:.1f}",
                f"{model['hand_out_pages_per_second']:.1f} (capped at 10 a tick)",
            ]
        )
    return [
        "### Elastic capacity: handing pages out",
        "",
        "Reproduce: `.venv/bin/python -m bench.fanout`. "
        + context_line(result)
        + " The looping tick of decision 0025 hands each page of due tasks to a claim "
        "invocation: per page one due-index Query and one asynchronous `Invoke`. The real "
        f"tick against the AWS double ({result['double_latency_ms']} ms a call) with a real "
        "boto3 Lambda client answered 202 at botocore's `before-send` "
        f"{result['invoke_latency_ms']} ms after each request; CPU of the tick's process "
        "(less the double's model) per page handed out, unlimited (median of the repeats), "
        "and pages handed out per second under the CPU quota of 128 MB (the quota raised by "
        f"the double's own share, {result['double_model_cpu_share']:.0%}).",
        "",
        table(
            [
                "run",
                "pages",
                "tick CPU ms/page",
                "pages/s measured",
                "pages/s model (plan)",
            ],
            rows,
        ),
        "",
        "So a 128 MB shard hands out up to the cap of 10 pages a tick, 1,000 claims/s; each "
        f"page is claimed by an invocation of 1,769 MB at {claims} claims/s (measured above, "
        "double over HTTP) and "
        f"{model['claims_per_second_per_invocation']} by the model. With 4 shards and 20 "
        "claim invocations reserved (the defaults) a burst is claimed at about 4,000 fires/s, "
        "against about 670/s for 4 looping ticks of 640 MB.",
        "",
    ]


def store_label(run: dict[str, Any]) -> str:
    """The store a run used, with its ``--sync`` on SQLite and where its workers ran."""
    store = str(run.get("store", "emulator"))
    label = f"{store} (--sync {run['sync']})" if run.get("sync") else store
    if run.get("worker_processes") == 0:
        label += ", workers as threads of one process"
    if run.get("answer_after_seconds"):
        label += f", handler answers after {run['answer_after_seconds']:g} s"
    return label


# Local mode's goals (issue 22), on the row that runs as `dynacron local` does by default.
SUSTAINED_GOAL = 1500
CPU_GOAL_MS = 1.0
SLOW_DRAIN_GOAL = 15.0


def burst_section(result: dict[str, Any]) -> list[str]:
    runs = result.get("runs", [result])
    figure, axis = plt.subplots(figsize=(6, 4))
    for run in runs:
        arrivals = run["arrivals"]
        label = f"{store_label(run)}: {run['tasks']} tasks"
        axis.plot(arrivals, range(1, len(arrivals) + 1), label=label)
    axis.set_xlabel("seconds after the due second")
    axis.set_ylabel("executions delivered")
    axis.set_title("Burst: tasks due in one second")
    axis.legend(fontsize="small")
    image = save(figure, "burst.png")
    rows = []
    for run in runs:
        lateness = run["lateness_seconds"]
        default = run.get("row") == "sqlite"
        sustained = run.get("sustained_fires_per_second")
        cpu = run.get("cpu_ms_per_fire")
        goals = []
        if default and sustained:
            goals.append(f"sustained ≥ {SUSTAINED_GOAL}/s {verdict(sustained >= SUSTAINED_GOAL)}")
        if default and cpu is not None:
            goals.append(f"CPU ≤ {CPU_GOAL_MS:g} ms {verdict(cpu <= CPU_GOAL_MS * 1.05)}")
        if run.get("answer_after_seconds"):
            met = run["drain_seconds"] <= SLOW_DRAIN_GOAL and run["lost"] == 0
            goals.append(f"all within {SLOW_DRAIN_GOAL:g} s {verdict(met)}")
        rows.append(
            [
                store_label(run),
                (run.get("workers_line") or "").removeprefix("workers").strip(),
                run["tasks"],
                run["unique_executions"],
                run["lost"],
                run["duplicates"],
                run["drain_seconds"],
                sustained or "",
                cpu if cpu is not None else "",
                run.get("bare_httpx_posts_per_second") or "",
                lateness.get("p50"),
                lateness.get("p99"),
                "; ".join(goals),
            ]
        )
    return [
        "## 5. Burst",
        "",
        context_line(result),
        "",
        "One-time tasks due at the same second, written straight into the store (the SQLite "
        "file of a fresh data directory, or the embedded AWS), then fired by `dynacron local` "
        "(its default workers, as the `workers` column says) to a minimal asyncio loopback "
        "handler. By default "
        "local mode runs its workers in processes of their own (two on this machine); the "
        "`workers as threads of one process` row is how it ran before issue 22. `sustained` "
        "counts from the first delivery to the last. `CPU ms/fire` is the CPU (user + system) "
        "of every process of local mode, from the due second to the last delivery (psutil, "
        "sampled every 0.2 s), divided by the fires. `bare httpx` is a baseline measured in "
        "the same run: a threaded httpx client (8 threads) posting the "
        "same bodies to the same handler and doing nothing else. The slow row's handler "
        "answers each call 1 s after it arrived: how many calls local mode has in flight "
        "at once.",
        "",
        table(
            [
                "store",
                "workers",
                "tasks",
                "unique",
                "lost",
                "duplicates",
                "drain s",
                "sustained fires/s",
                "CPU ms/fire",
                "bare httpx posts/s",
                "p50",
                "p99",
                "goals",
            ],
            rows,
        ),
        "",
        image,
        "",
    ]


VERSUS_SIDES = (
    ("apscheduler", "APScheduler 3.11 (SQLAlchemy job store on SQLite, 10 threads)"),
    ("huey", "Huey 3.5 (SQLite storage, consumer of 10 threads)"),
    ("dynacron", "dynacron local mode (SQLite)"),
)


def versus_section(result: dict[str, Any]) -> list[str]:
    sides = [(key, label, result[key]) for key, label in VERSUS_SIDES if key in result]
    figure, axis = plt.subplots(figsize=(6, 4))
    for _, label, side in sides:
        axis.plot(side["arrivals"], range(1, len(side["arrivals"]) + 1), label=label)
    axis.set_xlabel("seconds after the due second")
    axis.set_ylabel("jobs whose call reached the handler")
    axis.legend(fontsize="small")
    image = save(figure, "versus_apscheduler.png")
    others = [side["drain_seconds"] for name, _, side in sides if name != "dynacron"]
    rows = []
    for name, label, side in sides:
        goal = ""
        if name == "dynacron" and others:
            goal = f"{verdict(side['drain_seconds'] < min(others))} (faster than both)"
        rows.append(
            [
                label,
                side["ran"],
                side.get("duplicates", 0),
                side["drain_seconds"],
                round(side["ran"] / side["drain_seconds"], 1) if side["drain_seconds"] else "",
                side.get("cpu_ms_per_job", ""),
                *(side["lateness_seconds"].get(q) for q in ("p50", "p99", "max")),
                goal,
            ]
        )
    return [
        "## 6. Side by side with APScheduler and Huey",
        "",
        context_line(result),
        "",
        f"{result['jobs']} one-time jobs due at the same second, the same HTTP job for each "
        "scheduler, one scheduler after the other in one run: each job POSTs a small JSON "
        "body to a minimal loopback handler (`bench/loopback.py`). APScheduler's and Huey's "
        f"job function posts with a keep-alive httpx client per thread ({result['threads']} "
        "threads each); dynacron's worker posts it signed, with its queue message and "
        "execution record. `misfire_grace_time=None` so APScheduler runs every job however "
        "late; Huey's scheduler moves due jobs to its queue every second. Each scheduler runs "
        "in processes of its own; `CPU ms/job` is theirs (psutil, from the due second to the "
        "last call). Drain = the due second to the last call received. Goal: dynacron drains "
        "faster than both.",
        "",
        table(
            [
                "scheduler",
                "ran",
                "duplicates",
                "drain s",
                "jobs/s",
                "CPU ms/job",
                "p50",
                "p99",
                "max lateness",
                "goal",
            ],
            rows,
        ),
        "",
        image,
        "",
    ]


def overlap_section(result: dict[str, Any]) -> list[str]:
    before, after = result["before"], result["after"]
    lines = [
        "## 8. Overlapping worker: Lambda GB-seconds per fire, and a slow handler locally",
        "",
        context_line(result),
        "",
    ]
    runs = result.get("lambda", [])
    if runs:
        latencies = sorted({r["handler_seconds"] for r in runs})
        by = {(r["shape"], r["handler_seconds"]): r for r in runs}
        rows = []
        for latency in latencies:
            old, new = by[("before", latency)], by[("after", latency)]
            planned = by.get(("planned", latency), {})
            rows.append(
                [
                    f"{latency:g} s",
                    old["gb_seconds_per_fire"],
                    new["gb_seconds_per_fire"],
                    f"{old['gb_seconds_per_fire'] / new['gb_seconds_per_fire']:.1f}x",
                    planned.get("gb_seconds_per_fire", ""),
                    old["cpu_ms_per_fire"],
                    new["cpu_ms_per_fire"],
                    new["wall_seconds_per_fire"],
                ]
            )
        sweep = [
            [f"{r['handler_seconds']:g} s", *r["gb_seconds_per_fire_by_memory"].values()]
            for r in runs
            if r["shape"] == "after"
        ]
        memories = list(
            next(r for r in runs if r["shape"] == "after")["gb_seconds_per_fire_by_memory"]
        )
        lines += [
            "The real `app.worker` on SQS batches of one-time fires whose handler, a loopback "
            "server in its own process, answers after the latency shown; DynamoDB is the AWS "
            f"double at {result['dynamodb_latency_ms']:g} ms a call. Before: one call at a "
            f"time, batches of {before['batch']}, {before['memory_mb']} MB. After: "
            f"{after['concurrency']} calls at once, batches of {after['batch']}, "
            f"{after['memory_mb']} MB. GB-s per fire is memory x invocation time / fires, the "
            "time estimated at Lambda's CPU share for the memory (one vCPU at "
            f"{result['full_vcpu_memory_mb']:,} MB) from the wall time and CPU measured here "
            "(`bench/overlap.py` says how). Planned: what `dynacron plan` sizes at a high "
            "rate, full batches of as many calls as run at once, at the memory its cost model "
            "prices; `capacity_model.MEASURED.worker_gb_seconds_per_fire` carries its figures.",
            "",
            table(
                [
                    "handler",
                    "GB-s / fire before",
                    "GB-s / fire after",
                    "ratio",
                    "GB-s / fire planned",
                    "CPU ms / fire before",
                    "after",
                    "wall s / fire after (here)",
                ],
                rows,
            ),
            "",
            "After, by worker memory (GB-s per fire; CPU-bound where the figure stops falling):",
            "",
            table(["handler", *(f"{m} MB" for m in memories)], sweep),
            "",
        ]
    local = result.get("local", [])
    if local:
        lines += [
            f"Local mode on SQLite: {local[0]['tasks']} one-time tasks due in the same second "
            f"against a handler that answers in {local[0]['handler_seconds']:g} s; goal: all "
            "reached it within 15 s.",
            "",
            table(
                ["options", "delivered", "lost", "duplicates", "drain s", "calls at once"],
                [
                    [
                        r["options"],
                        r["delivered"],
                        r["lost"],
                        r["duplicates"],
                        f"{r['drain_seconds']} {verdict(r['drain_seconds'] <= 15)}",
                        r["calls_in_flight_at_most"],
                    ]
                    for r in local
                ],
            ),
            "",
        ]
    return lines


STAGES = {
    "due_to_found": "due → found by the tick's due query",
    "found_to_read": "→ re-read for its claim (tick or claim invocation)",
    "read_to_sent": "→ message sent",
    "sent_to_received": "→ received by the event source mapping",
    "received_to_handler": "→ the handler's call",
}


def scale_stages(result: dict[str, Any]) -> list[str]:
    """Where lateness goes: each fire's wait between stages, by phase."""
    stages = result.get("lateness_stages_seconds")
    if not stages:
        return []
    rows = [
        [
            f"{phase}: {label}",
            *(by_stage.get(name, {}).get(q) for q in ("p50", "p95", "p99", "max")),
        ]
        for phase, by_stage in stages.items()
        for name, label in STAGES.items()
        if name in by_stage
    ]
    return [
        "Where it goes: each fire's wait between stages (AWS calls timed where the "
        "service applies them, halfway through their round trip).",
        "",
        table(["phase: stage", "p50 s", "p95 s", "p99 s", "max s"], rows),
        "",
    ]


def scale_split(result: dict[str, Any]) -> list[str]:
    """What splitting the run over processes changes, when it was split."""
    processes = result.get("processes", 1)
    if processes == 1:
        return []
    return [
        f"The run is split over {processes} processes (`--processes`, one per core), each "
        "a simulation of its share of the shards (shard s in process s mod "
        f"{processes}) and of their tasks, with an even share of every limit AWS pools "
        "over shards: the account's Lambda concurrency and each function's scaling "
        "rate, the claim function's reserved concurrency, the mapping's concurrency, "
        "the table's and each index's on-demand quota, the queue's in-flight quota. "
        "Per-partition limits are per shard already (a due-index partition is a bucket "
        "of one shard), so the parts are independent; their figures are added, their "
        "lateness pooled. An even split is stricter than AWS (a part cannot use what "
        "the other leaves), and peaks are added, an upper bound.",
        "",
    ]


def scale_receives(result: dict[str, Any]) -> str:
    receives = result.get("esm_receives")
    if not receives:
        return ""
    return f"; its polls returned {receives['all']:,} times, {receives['empty']:,} of them empty"


def scale_sqs_requests(cost: dict[str, Any]) -> str:
    by_operation = cost.get("sqs_requests_per_fire_by_operation", {})
    return ", ".join(f"{name} {n}" for name, n in by_operation.items()) or "by operation: n/a"


def scale_section(result: dict[str, Any]) -> list[str]:
    scenario, deployment = result["scenario"], result["deployment"]
    late = result["lateness_seconds"]
    steady_p99 = late["steady"].get("p99", float("inf"))
    kept_up = result["lost"] == 0 and steady_p99 <= 1.0
    phases = [
        [
            phase,
            late[phase].get("count", 0),
            late[phase].get("p50"),
            late[phase].get("p99"),
            late[phase].get("max"),
        ]
        for phase in ("steady", "burst")
    ]
    throttles = result["throttled_requests"]
    throttle_rows = [
        [t["table"], t["index"] or "(table)", t["partition"], t["reason"], t["requests"]]
        for t in throttles["by_partition"]
    ]
    function_rows = [
        [
            name,
            f["memory_mb"],
            f["peak_concurrency"],
            f["invocations"],
            f["environments"],
            f["gb_seconds"],
            f["throttled_starts"],
            f["async_events_dropped"],
            ", ".join(f"{k} {v}" for k, v in f["errors"].items()) or "none",
        ]
        for name, f in result["functions"].items()
    ]
    cost = result["cost"]
    cost_rows = [[k.replace("_", " "), v] for k, v in cost["usd_per_million_fires"].items()]
    cost_rows.append(["**total**", f"**{cost['usd_per_million_fires_total']}**"])
    check = result.get("checked_against_moto", {})
    return [
        "## 9. Full rate against AWS's limits (simulated)",
        "",
        context_line(result),
        "",
        f"This run: `{result.get('command', 'python -m bench.scale')}`.",
        "",
        "dynacron's real tick (looping, handing pages out), claim function and worker "
        "(`Dynacron.tick`, `.claim`, `.worker`), each simulated Lambda invocation with a "
        "`Dynacron` of its execution environment, on virtual time: a discrete-event "
        "simulation (`bench/simulation.py`) whose invocations advance by each AWS call's "
        "drawn round trip and by their own CPU, measured here and slowed down by their "
        "memory's share of a vCPU (botocore's CPU per call, measured here through real "
        "clients, charged too). AWS is the double (`bench/aws_double.py`) with AWS's "
        "documented limits (`bench/aws_limits.py` names the pages): DynamoDB 1,000 write "
        "and 3,000 read units a second per partition key value of the tables and indexes, "
        "GSI back-pressure, 40,000 units per table; SQS 120,000 in flight, 10 per "
        "receive, visibility, its changes (the worker's message holds) and redrive; "
        "Lambda 1,000 concurrent, reserved concurrency, "
        "1,000 environments per 10 s per function, asynchronous retries, the event source "
        "mapping's pollers and maximum concurrency (`bench/lambda_double.py`); the "
        "mapping's pollers long-poll as SQS answers (a poll returns what is visible, up "
        "to 10, as soon as a message is; empty only after its 20 s; each poll one billed "
        "request). Throttled "
        "calls are retried by botocore's own (standard-mode) retry handler, its backoff "
        "slept in virtual time, then by the code.",
        "",
        *scale_split(result),
        f"Deployment (`dynacron plan --fires-per-second {scenario['fires_per_second']}`, "
        "the template's defaults for the rest): "
        f"{deployment['shard_count']} shards, tick {deployment['tick_memory_mb']} MB "
        f"x {deployment['tick_concurrency']} threads, every "
        f"{scenario.get('tick_interval_seconds', 1.0):g} s (decision 0042), "
        f"claim {deployment['claim_memory_mb']} MB "
        f"reserved {deployment['claim_reserved_concurrency']}, worker "
        f"{deployment['worker_memory_mb']} MB, batch {deployment['worker_batch_size']}, "
        f"mapping maximum {deployment['worker_max_concurrency']}, "
        f"worker_concurrency {scenario['worker_in_flight']} (a batch's records run at "
        "once, up to that many: the worker's Powertools batch processor, its records run "
        "as processes of the simulation instead of threads). Scenario: "
        f"{scenario['registered']:,} recurring tasks registered (every 10 minutes, so a "
        "claim moves the entry within its due-index partition), "
        f"{scenario['fires_per_second']:,} falling due a second for "
        f"{scenario['steady_seconds']:.0f} s, the rest later in the hour; then "
        f"{scenario['burst']:,} one-time tasks due within one second, "
        f"{scenario['burst_after_seconds']:.0f} s after; {scenario['tenants']:,} tenants; "
        f"handlers answer in {scenario['handler_latency_seconds']['median']} s median, "
        f"{scenario['handler_latency_seconds']['p99']} s p99.",
        "",
        f"**{result['fired']:,} of {result['due']:,} due occurrences fired; lost "
        f"{result['lost']}** (not SUCCEEDED on the executions table: "
        f"{result['statuses']}); duplicate handler calls {result['duplicate_handler_calls']}, "
        f"duplicate dispatch messages {result['duplicate_messages']}, redriven "
        f"{result['redriven_messages']}. 10,000 fires/s with p99 ≤ 1 s and 0 lost: "
        f"{verdict(kept_up)}.",
        "",
        "Lateness: from the scheduled instant to the handler's call.",
        "",
        table(["phase", "fires", "p50 s", "p99 s", "max s"], phases),
        "",
        *scale_stages(result),
        f"Throttled requests: {throttles['total']:,} in {throttles['partitions']} "
        f"partitions; retried by botocore {throttles['attempts_retried_by_botocore']:,}; "
        f"still throttled after botocore's retries (the code's own retry or redelivery "
        f"took them): {throttles['calls_that_reached_the_code'] or 'none'}.",
        "",
        table(["table", "index", "partition", "reason", "requests"], throttle_rows)
        if throttle_rows
        else "No partition was throttled.",
        "",
        table(
            [
                "function",
                "MB",
                "peak concurrency",
                "invocations",
                "environments",
                "GB-s",
                "throttled starts",
                "async dropped",
                "errors",
            ],
            function_rows,
        ),
        "",
        f"Event source mapping pollers at most {result['esm_peak_pollers']}; the account's "
        f"concurrency at most {result['account_peak_concurrency']}"
        + (" (the parts' peaks added)" if result.get("processes", 1) > 1 else "")
        + scale_receives(result)
        + ".",
        "",
        f"Cost per million fires at AWS's list prices (on demand; "
        f"{cost['write_units_per_fire']} write and {cost['read_units_per_fire']} read units, "
        f"{cost['sqs_requests_per_fire']} SQS requests "
        f"({scale_sqs_requests(cost)}), "
        f"{cost['lambda_gb_seconds_per_fire']} Lambda GB-s per fire):",
        "",
        table(["part", "USD per million fires"], cost_rows),
        "",
        f"The double checked against moto (same code, same tasks, same items and messages "
        f"left, a throttled case included): {check or 'not run'}.",
        "",
        f"Runtime: {result['wall_seconds']:.0f} s wall, {result['cpu_seconds']:.0f} s CPU "
        f"({result['cpu_ms_per_fire']} ms per fire, the simulation included), "
        f"{result['simulated_seconds']:.0f} simulated seconds, {result['max_rss_mb']:,} MB"
        + (f" (in {result['processes']} processes)." if result.get("processes", 1) > 1 else "."),
        "",
    ]


def bulk_import_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The ``import`` figure of each size: ``dynacron tasks import`` into local mode."""
    rows, met = [], True
    for run in runs:
        figure = run.get("import")
        if figure is None:
            continue
        met = met and figure["tasks_per_second"] >= figure["goal_tasks_per_second"]
        rows.append(
            [
                f"{figure['tasks']:,}",
                f"{figure['tasks_per_second']:,}",
                f"{figure['seconds']:,}",
                f"{figure['local_cpu_seconds'] * 1e6 / figure['tasks']:,.0f}",
                f"{figure['cli_cpu_seconds'] * 1e6 / figure['tasks']:,.0f}",
                figure["concurrency"],
            ]
        )
    if not rows:
        return []
    goal = runs[0]["import"]["goal_tasks_per_second"]
    return [
        "### Import",
        "",
        "`dynacron tasks import FILE` (JSON Lines, batches of 100 through `POST /tasks/batch`, "
        "each line's idempotency key derived from it) into a fresh `dynacron local` "
        "(SQLite, durability `acknowledged`), the CLI and local mode on the same machine. "
        f"Goal: {goal:,} tasks/s or more: {verdict(met)}.",
        "",
        table(
            [
                "tasks",
                "tasks/s",
                "seconds",
                "local mode CPU µs/task",
                "CLI CPU µs/task",
                "batches in flight",
            ],
            rows,
        ),
        "",
    ]


def bulk_lookup_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The ``lookup`` and ``forecast`` figures of each size, on the loaded instance."""
    rows = []
    met = True
    for run in runs:
        lookup, forecast = run.get("lookup"), run.get("forecast")
        if lookup is None or forecast is None:
            continue
        met = met and lookup["max_ms"] < lookup["goal_ms"] and forecast["median_s"] < 29
        rows.append(
            [
                f"{run['tasks']:,}",
                lookup["median_ms"],
                lookup["max_ms"],
                forecast["median_s"],
                "yes" if forecast["complete"] else f"no ({forecast['not_counted']:,} not counted)",
                f"{forecast['executions']:,}",
            ]
        )
    if not rows:
        return []
    return [
        "### Finding one, and the forecast",
        "",
        "On the same instance after the import, over HTTP: `GET /tasks?name_prefix=` with "
        "one task's whole name (20 times; decision 0045's name index), and "
        "`GET /forecast?hours=24` of the tenant holding them all (3 times; decision "
        "0046's schedule census). Goals: a lookup under a second, the forecast within "
        f"the API's 29 s and complete or saying by how much not: {verdict(met)}.",
        "",
        table(
            [
                "tasks",
                "lookup median ms",
                "lookup max ms",
                "forecast s",
                "forecast complete",
                "executions forecast",
            ],
            rows,
        ),
        "",
    ]


def bulk_dynamodb_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The same figures modelled for DynamoDB (``dynacron.planning.imports``): one
    tenant's import is bound by the stage's throttle, or by its tenant-index parts'
    partitions (decision 0053), whichever is lower."""
    from dynacron.api.requests import MAX_BATCH
    from dynacron.definitions.resources import TENANT_INDEX_PARTS
    from dynacron.planning.imports import DEFAULT_API_RATE_LIMIT, plan_import
    from dynacron.planning.partitions import PARTITION_WRITE_UNITS

    stage = DEFAULT_API_RATE_LIMIT * MAX_BATCH
    rows = []
    for tasks in sorted({run["tasks"] for run in runs} | {100_000, 1_000_000}):
        per_task = plan_import(tasks, 1.0)
        entry_units = per_task.tenant_index_partition_writes / per_task.tasks_per_second
        rate = min(stage, PARTITION_WRITE_UNITS / entry_units)
        units = (
            per_task.table_write_units
            + sum(per_task.index_write_units.values())
            + per_task.coordination_write_units
        ) / per_task.tasks_per_second
        rows.append(
            [
                f"{tasks:,}",
                f"{rate:,.0f}",
                f"{tasks / rate / 60:,.1f}",
                f"{units:.2f}",
                f"about {TENANT_INDEX_PARTS} Queries (one a part) + 1 BatchGetItem "
                "(about 29.5 RCU a page of 50)",
                "8 Queries + 1 per 1 MB of census",
            ]
        )
    return [
        "### The same on DynamoDB (modelled)",
        "",
        "From `dynacron.planning.imports` (`dynacron plan --import-tasks N`), not measured: "
        f"one tenant's tasks are spread over {TENANT_INDEX_PARTS} partitions of its tenant and "
        f"name indexes (decision 0053), {TENANT_INDEX_PARTS * PARTITION_WRITE_UNITS:,} writes a "
        "second at DynamoDB's limit per partition, so the default stage throttle's "
        f"{stage:,.0f} tasks/s (50 batches a second) binds first; raise it "
        "(`api_rate_limit`) and the table's warm throughput to go further (docs/deploy.md). "
        "A lookup and a forecast read as many items at 100 k as at 1 M tasks: the name "
        "index's page (merged over the parts), and the census's entries (distinct schedules, "
        "not tasks; decision 0046).",
        "",
        table(
            [
                "tasks",
                "import tasks/s (one tenant)",
                "import minutes",
                "write units/task",
                "lookup reads",
                "forecast reads",
            ],
            rows,
        ),
        "",
    ]


# One function per figure of bench.bulk, each given every size's run.
BULK_FIGURES = [bulk_import_lines, bulk_lookup_lines, bulk_dynamodb_lines]


def bulk_section(result: dict[str, Any]) -> list[str]:
    lines = [
        "## 10. Ten million tasks: importing them locally",
        "",
        context_line(result),
        f"This run: `{result.get('command', 'python -m bench.bulk')}`.",
        "",
    ]
    for figure in BULK_FIGURES:
        lines += figure(result["runs"])
    return lines


def main() -> None:
    sections: list[str] = [
        "# Benchmarks",
        "",
        "Regenerated by `make bench` (about 20 minutes; `BENCH_QUICK=1 make bench` for a short "
        "run) from `bench/results/*.json`; `.venv/bin/python -m bench.report` redraws this page "
        "alone, `make bench BENCH=cost` (or `.venv/bin/python -m bench.run cost`) reruns one "
        "section and redraws it. Each section names its own command, date, machine, versions "
        "and load: the machine is shared, so compare figures within a section, not across runs.",
        "",
    ]
    builders = [
        ("cost", cost_section, "python -m bench.cost"),
        ("scaling", scaling_section, "python -m bench.scaling"),
        ("lateness", lateness_section, "python -m bench.lateness"),
        ("throughput", throughput_section, "python -m bench.throughput"),
        ("burst", burst_section, "python -m bench.burst"),
        ("versus_apscheduler", versus_section, "python -m bench.versus_apscheduler"),
        ("capacity", capacity_section, "python -m bench.capacity"),
        ("overlap", overlap_section, "python -m bench.overlap"),
        ("scale", scale_section, "python -m bench.scale"),
        ("bulk", bulk_section, "python -m bench.bulk"),
    ]
    for name, build, command in builders:
        result = load(name)
        if result is None:
            title = f"## {builders.index((name, build, command)) + 1}. {name}"
            sections += [title, "", f"Not run in this pass: `.venv/bin/{command}`.", ""]
            continue
        body = build(result)
        body.insert(1, f"\nReproduce: `.venv/bin/{command}`")
        sections += body
    notes = RESULTS.parent / "NOTES.md"
    if notes.exists():
        sections += [notes.read_text()]
    OUT.write_text("\n".join(sections).rstrip() + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

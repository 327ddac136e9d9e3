"""The benchmark's AWS double answers a tick exactly as moto does (bench/aws_double.py)."""

from __future__ import annotations

from bench.throughput import verify_against_moto


def test_the_double_and_moto_leave_the_same_state_after_the_same_tick() -> None:
    # Given 50 tasks covering every path of a tick, stored once in moto and once in the double
    # When the same tick runs against each
    outcome = verify_against_moto()

    # Then both claimed, sent and recorded the same (it raises otherwise), on every path
    assert outcome["identical"]
    assert outcome["claimed"] > outcome["tasks"] / 2
    assert outcome["rescheduled"] > 0
    assert outcome["skipped_executions"] > 0
    assert outcome["stale_claim_refused"]

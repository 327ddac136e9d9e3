"""The pace of ``dynacron admin backfill-name-keys --max-writes-per-second``."""

from __future__ import annotations

from dynacron.cli.admin import WritePace


def test_writes_are_spaced_to_the_rate_and_a_slow_stretch_buys_no_burst() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(round(seconds, 6))
        now[0] += seconds

    pace = WritePace(4.0, clock=lambda: now[0], sleep=sleep)
    # Four writes in a row at 4 a second: the first at once, each next 0.25 s later
    for _ in range(4):
        pace.wait()
    assert slept == [0.25, 0.25, 0.25]
    assert now[0] == 100.75
    # After a pause of 10 s, the next write goes at once and the one after waits a slot
    now[0] += 10
    pace.wait()
    pace.wait()
    assert slept == [0.25, 0.25, 0.25, 0.25]

"""The worker's time for one more record, asked by the records of a batch as each
one starts, from several threads at once (decision 0034)."""

from __future__ import annotations

import threading
from datetime import timedelta

from dynacron.services.attempt_records import InvocationBudget

CALL, MARGIN = timedelta(seconds=10), timedelta(seconds=5)


class Draining:
    """An invocation whose time left drops by ``step_ms`` each time it is asked."""

    def __init__(self, left_ms: int, step_ms: int = 0) -> None:
        self.left_ms, self.step_ms, self.asked = left_ms, step_ms, 0

    def get_remaining_time_in_millis(self) -> int:
        self.asked += 1
        left = self.left_ms
        self.left_ms -= self.step_ms
        return left


def test_the_first_record_is_taken_even_without_time_for_it() -> None:
    budget = InvocationBudget(Draining(1_000), CALL, MARGIN)
    assert budget.take_one()
    assert not budget.take_one()


def test_a_record_starts_only_while_a_whole_call_and_the_margin_fit() -> None:
    invocation = Draining(16_000, step_ms=1_000)
    budget = InvocationBudget(invocation, CALL, MARGIN)
    assert [budget.take_one() for _ in range(4)] == [True, True, True, False]


def test_once_out_of_time_no_later_record_starts_even_if_time_seemed_to_come_back() -> None:
    invocation = Draining(10_000)
    budget = InvocationBudget(invocation, CALL, MARGIN)
    assert budget.take_one()
    assert not budget.take_one()
    invocation.left_ms = 60_000
    assert not budget.take_one()
    assert invocation.asked == 1


def test_records_asking_at_once_from_many_threads_take_exactly_what_fits() -> None:
    # Each question finds a second less: 30 s, 29 s, ... down to 15 s (16 answers of
    # yes) after the first record, which is taken without asking.
    invocation = Draining(30_000, step_ms=1_000)
    budget = InvocationBudget(invocation, CALL, MARGIN)
    start = threading.Barrier(50)
    taken: list[bool] = []

    def ask() -> None:
        start.wait()
        for _ in range(4):
            taken.append(budget.take_one())

    threads = [threading.Thread(target=ask) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert taken.count(True) == 17
    assert invocation.asked == 17


def test_without_an_invocation_every_record_is_taken() -> None:
    budget = InvocationBudget(None, CALL, MARGIN)
    assert all(budget.take_one() for _ in range(100))

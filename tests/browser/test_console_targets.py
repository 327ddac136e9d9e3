"""A target task in the console: named by its service and resource ("SQS queue
jobs"), in the task list and on the task's page, never as a blank URL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from dynacron.local.aws import REGION
from tests.browser.harness import ConsoleServer, console_server, unique

pytestmark = [pytest.mark.system, pytest.mark.browser]

ROLE = "arn:aws:iam::000000000000:role/dynacron-target/jobs"


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    """Local mode on its AWS emulator: the one store that calls targets locally."""
    data = tmp_path_factory.mktemp("console-targets") / "data"
    with console_server(data, "--store", "emulator") as server:
        yield server


def test_a_target_task_is_shown_as_its_service_and_resource(
    page: Page, console: ConsoleServer
) -> None:
    # Given a task whose handler is an SQS queue, and one whose handler is a state machine
    queue = console.register(
        name=unique("queue-job"),
        handler_url=None,
        target={"arn": f"arn:aws:sqs:{REGION}:000000000000:jobs", "role_arn": ROLE},
    )
    machine = console.register(
        name=unique("nightly-run"),
        handler_url=None,
        target={
            "arn": f"arn:aws:states:{REGION}:000000000000:stateMachine:nightly",
            "role_arn": ROLE,
        },
    )
    # When the task list shows them
    page.goto("/console/tasks")
    queue_row = page.locator(f'tr[data-task-id="{queue["task_id"]}"]')
    expect(queue_row.locator(".target-name")).to_have_text("SQS queue jobs")
    machine_row = page.locator(f'tr[data-task-id="{machine["task_id"]}"]')
    expect(machine_row.locator(".target-name")).to_have_text("Step Functions state machine nightly")
    # And the task's page names the target, with its ARN beside it
    queue_row.get_by_role("link", name=queue["name"]).click()
    definition = page.locator("dl.facts.two-columns")
    expect(definition).to_contain_text("SQS queue jobs")
    expect(definition).to_contain_text(f"arn:aws:sqs:{REGION}:000000000000:jobs")
    expect(definition).not_to_contain_text("Python handler")

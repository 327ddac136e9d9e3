"""Pages of due tasks handed to the claim function with an asynchronous Lambda invoke
(the ``DuePageHandOut`` port, decision 0025)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dynacron.adapters.aws.errors import translating
from dynacron.adapters.due_page_events import page_to_event
from dynacron.ports import DuePage

if TYPE_CHECKING:
    from types_boto3_lambda.client import LambdaClient


class LambdaDuePageHandOut:
    """Hands a page to the claim function: ``Invoke`` with InvocationType ``Event``.

    Lambda queues the event and answers 202 at once; the looping tick goes on.
    Any error (throttled, function missing, no permission) raises, and the tick
    claims the page itself.
    """

    def __init__(self, client: LambdaClient, function_name: str) -> None:
        self._client = translating(client)
        self._function = function_name

    def hand_out(self, page: DuePage) -> None:
        response = self._client.invoke(
            FunctionName=self._function,
            InvocationType="Event",
            Payload=json.dumps(page_to_event(page)).encode(),
        )
        status = response.get("StatusCode")
        if status != 202:
            raise ClaimNotQueued(f"the claim function answered {status}, not 202")


class ClaimNotQueued(RuntimeError):
    """Lambda did not queue a claim invocation."""

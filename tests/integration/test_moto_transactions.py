"""The moto transaction speed-up keeps a cancelled transaction all-or-nothing."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

TABLE = "transactions"


@pytest.fixture
def dynamodb(aws: tuple[Any, Any]) -> Any:
    client = aws[0]
    client.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.put_item(TableName=TABLE, Item={"k": {"S": "old"}, "v": {"N": "1"}})
    return client


def items(dynamodb: Any) -> dict[str, str]:
    scanned = dynamodb.scan(TableName=TABLE, ConsistentRead=True)["Items"]
    return {i["k"]["S"]: i["v"]["N"] for i in scanned}


def test_a_cancelled_transaction_leaves_every_item_as_it_was(dynamodb: Any) -> None:
    # Given a transaction whose last item fails its condition, after the first two
    # items (a new item, an overwrite) were applied in moto's backend
    with pytest.raises(ClientError) as cancelled:
        dynamodb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": TABLE, "Item": {"k": {"S": "new"}, "v": {"N": "2"}}}},
                {"Put": {"TableName": TABLE, "Item": {"k": {"S": "old"}, "v": {"N": "9"}}}},
                {
                    "ConditionCheck": {
                        "TableName": TABLE,
                        "Key": {"k": {"S": "missing"}},
                        "ConditionExpression": "attribute_exists(k)",
                    }
                },
            ]
        )
    assert cancelled.value.response["Error"]["Code"] == "TransactionCanceledException"
    # Then nothing of it is left
    assert items(dynamodb) == {"old": "1"}


def test_a_transaction_that_succeeds_writes_every_item(dynamodb: Any) -> None:
    dynamodb.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": TABLE, "Item": {"k": {"S": "new"}, "v": {"N": "2"}}}},
            {
                "Update": {
                    "TableName": TABLE,
                    "Key": {"k": {"S": "old"}},
                    "UpdateExpression": "SET v = :v",
                    "ExpressionAttributeValues": {":v": {"N": "3"}},
                }
            },
        ]
    )
    assert items(dynamodb) == {"old": "3", "new": "2"}

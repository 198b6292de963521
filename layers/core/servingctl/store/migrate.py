"""Moving a table's items from the shared-partition layout to one partition per profile and run.

Before: every profile state under pk="profile" (sk=<profile>) and every benchmark run under pk="run"
(sk=<run id>), so no IAM condition could tell one profile or run from another. After
(servingctl.store.dynamodb, servingctl.store.benchmarks_dynamodb): pk="profile#<profile>" sk="state"
and pk="run#<run id>" sk="run", both with the listing index's lpk/lsk.

Run once after deploying the new stack, with the controller idle (no start, stop or benchmark
running) and credentials that may Scan, Put and Delete on the table:
    python -m servingctl.store.migrate --table <StateTable>
Idempotent: an item already moved is left as it is (the old copy is deleted only after the new one
is in place, so an interrupted run is finished by the next one); a second run moves nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
from boto3.dynamodb.conditions import Attr
from botocore.exceptions import ClientError

from servingctl.store.benchmarks_dynamodb import RUN_SK
from servingctl.store.dynamodb import LIST_PK, LIST_SK, profile_key

# The earlier layout's shared partitions -> the new key of one of their items.
OLD_PARTITIONS: dict[str, Callable[[str], dict[str, str]]] = {
    "profile": profile_key,
    "run": lambda run_id: {"pk": f"run#{run_id}", "sk": RUN_SK},
}


@dataclass(frozen=True)
class Moved:
    """What one migration did: items copied to their new key, old copies deleted, new ones already there."""

    copied: int
    deleted: int
    already_there: int


def _old_items(table: Any) -> Iterator[dict[str, Any]]:
    """Items still under an old shared partition (a Scan: the migration is a one-off admin step)."""
    kwargs: dict[str, Any] = {"FilterExpression": Attr("pk").is_in(list(OLD_PARTITIONS)), "ConsistentRead": True}
    while True:
        page = table.scan(**kwargs)
        yield from page["Items"]
        if "LastEvaluatedKey" not in page:
            return
        kwargs = kwargs | {"ExclusiveStartKey": page["LastEvaluatedKey"]}


def migrate(table_name: str, resource: Any | None = None) -> Moved:
    """Move every item of the old layout to its new key; a second call moves nothing."""
    table = (resource or boto3.resource("dynamodb")).Table(table_name)
    copied = deleted = already = 0
    for item in list(_old_items(table)):
        old_pk, name = item["pk"], item["sk"]
        moved = item | OLD_PARTITIONS[old_pk](name) | {LIST_PK: old_pk, LIST_SK: name}
        try:
            # Never over a newer record: one written under the new key wins over the old copy.
            table.put_item(Item=moved, ConditionExpression=Attr("pk").not_exists())
            copied += 1
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            already += 1
        table.delete_item(Key={"pk": old_pk, "sk": name})
        deleted += 1
    return Moved(copied, deleted, already)


def main(argv: list[str] | None = None) -> None:
    """CLI: migrate one table and print what moved."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="the StateTable's name (stack output or console)")
    moved = migrate(parser.parse_args(argv).table)
    print(f"copied {moved.copied}, already there {moved.already_there}, old copies deleted {moved.deleted}")


if __name__ == "__main__":
    main()

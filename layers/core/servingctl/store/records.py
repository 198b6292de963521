"""Per-request benchmark records as objects: gzip JSON lines, one object per scenario (or shard) and
attempt, under runs/<run id>/<scenario>.<attempt>.jsonl.gz, in S3 or in memory behind one small
interface. An object is written once: a key that holds one is refused (S3's If-None-Match), so a
retried or duplicate worker never replaces what another attempt wrote. A run's uploaded prompts
(runs/<run id>/dataset.jsonl, put by the CLI through a presigned URL) are read through it too."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import boto3
from botocore.exceptions import ClientError

from servingctl.schema.results import RequestRecord

CONTENT_TYPE = "application/x-ndjson"


class RecordsExist(Exception):
    """The key already holds an object (another attempt's): nothing was written."""


def records_key(run_id: str, scenario: str, shard: int | None = None, attempt: str | None = None) -> str:
    """Object key of a scenario's records (a shard's records live beside it until merged); each
    attempt (a Step Functions retry or redrive, a merge) has keys of its own. Readers take the key
    from the stored scenario, never from this layout."""
    base = f"runs/{run_id}/{scenario}" if shard is None else f"runs/{run_id}/shards/{scenario}/{shard}"
    return f"{base}.jsonl.gz" if attempt is None else f"{base}.{attempt}.jsonl.gz"


def dataset_key(run_id: str) -> str:
    """Object key of the prompts uploaded for a run (POST /benchmarks/{run_id}/dataset)."""
    return f"runs/{run_id}/dataset.jsonl"


def encode_records(records: Sequence[RequestRecord]) -> bytes:
    """Gzip JSON lines, one record a line, in the given order."""
    text = "".join(record.model_dump_json() + "\n" for record in records)
    # mtime 0: the same records always give the same bytes.
    return gzip.compress(text.encode(), mtime=0)


def decode_records(blob: bytes) -> list[RequestRecord]:
    """The records of an encoded object."""
    lines = gzip.decompress(blob).decode().splitlines()
    return [RequestRecord.model_validate_json(line) for line in lines if line]


class RecordStore(Protocol):
    """Where per-request records go."""

    def put_records(self, key: str, records: Sequence[RequestRecord]) -> str:
        """Write the records under key, once (RecordsExist when it holds an object); returns the key."""
        ...

    def get_records(self, key: str) -> list[RequestRecord]:
        """The records under key (KeyError when absent)."""
        ...

    def get_bytes(self, key: str, max_bytes: int) -> bytes:
        """The object under key (KeyError when absent, ValueError when larger than max_bytes)."""
        ...

    def uri(self, key: str) -> str:
        """Where key is, as a person reads it (s3://bucket/key)."""
        ...


class S3RecordStore:
    """Records in one S3 bucket."""

    def __init__(self, bucket: str, client: Any | None = None) -> None:
        self.bucket = bucket
        self._s3 = client or boto3.client("s3")

    def put_records(self, key: str, records: Sequence[RequestRecord]) -> str:
        """Write the records under key, once (RecordsExist when it holds an object); returns the key."""
        try:
            self._s3.put_object(
                Bucket=self.bucket, Key=key, Body=encode_records(records), ContentType=CONTENT_TYPE, IfNoneMatch="*"
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise RecordsExist(f"s3://{self.bucket}/{key} is already written") from None
            raise
        return key

    def get_records(self, key: str) -> list[RequestRecord]:
        """The records under key (KeyError when absent)."""
        return decode_records(self._object(key, "no records")["Body"].read())

    def get_bytes(self, key: str, max_bytes: int) -> bytes:
        """The object under key (KeyError when absent, ValueError when larger than max_bytes)."""
        answer = self._object(key, "nothing")
        if answer["ContentLength"] > max_bytes:
            answer["Body"].close()
            raise ValueError(f"{self.uri(key)}: {answer['ContentLength']} bytes; allowed: at most {max_bytes}")
        body: bytes = answer["Body"].read()
        return body

    def uri(self, key: str) -> str:
        """Where key is, as a person reads it (s3://bucket/key)."""
        return f"s3://{self.bucket}/{key}"

    def _object(self, key: str, missing: str) -> Any:
        try:
            return self._s3.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code == "NoSuchKey" or (code == "AccessDenied" and not self._listed(key)):
                raise KeyError(f"{missing} at {self.uri(key)}") from None
            raise

    def _listed(self, key: str) -> bool:
        """Whether the bucket lists key. S3 answers a missing key with 403 AccessDenied unless the
        reader may s3:ListBucket, and the roles' ListBucket grant is limited by an s3:prefix
        condition a GetObject does not carry: listing exactly that key tells a missing record from
        a refused read (which stays AccessDenied)."""
        found = self._s3.list_objects_v2(Bucket=self.bucket, Prefix=key, MaxKeys=1).get("Contents", [])
        return any(item["Key"] == key for item in found)


class MemoryRecordStore:
    """Records in a dict, encoded exactly like the S3 objects."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self._mutex = threading.Lock()

    def put_records(self, key: str, records: Sequence[RequestRecord]) -> str:
        """Write the records under key, once (RecordsExist when it holds an object); returns the key."""
        blob = encode_records(records)
        with self._mutex:
            if key in self.objects:
                raise RecordsExist(f"{key} is already written")
            self.objects[key] = blob
        return key

    def get_records(self, key: str) -> list[RequestRecord]:
        """The records under key (KeyError when absent)."""
        with self._mutex:
            if key not in self.objects:
                raise KeyError(f"no records at {key}")
            blob = self.objects[key]
        return decode_records(blob)

    def get_bytes(self, key: str, max_bytes: int) -> bytes:
        """The object under key (KeyError when absent, ValueError when larger than max_bytes)."""
        with self._mutex:
            if key not in self.objects:
                raise KeyError(f"nothing at {self.uri(key)}")
            blob = self.objects[key]
        if len(blob) > max_bytes:
            raise ValueError(f"{self.uri(key)}: {len(blob)} bytes; allowed: at most {max_bytes}")
        return blob

    def uri(self, key: str) -> str:
        """Where key is, as a person reads it."""
        return f"memory://{key}"

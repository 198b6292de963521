"""S3's moto accessor: whether an object exists (the twin's IAM conditions on a key read it)."""

from __future__ import annotations

from moto.s3.models import S3Backend, s3_backends

from servingctl.local.patching import Patch


def object_exists(account_id: str, bucket: str, key: str) -> bool:
    """True when the S3 bucket of account_id holds an object under key (current version)."""
    return s3_backends[account_id]["aws"].get_object(bucket, key) is not None


PATCHES = [
    Patch(
        "S3Backend.get_object",
        S3Backend,
        "get_object",
        ("self", "bucket_name", "key_name", "version_id", "part_number", "return_delete_marker"),
    ),
]

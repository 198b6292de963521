"""S3's moto accessor and patches: whether an object exists (the twin's IAM conditions on a key read
it), and the additional checksums (SHA256) of uploads as S3 keeps and checks them."""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

from moto.s3.models import S3Backend, s3_backends
from moto.s3.responses import S3Response

from servingctl_twin.patching import Patch, original, set_missing

CHECKSUM_HEADER = "x-amz-checksum-sha256"


def object_exists(account_id: str, bucket: str, key: str) -> bool:
    """True when the S3 bucket of account_id holds an object under key (current version)."""
    return s3_backends[account_id]["aws"].get_object(bucket, key) is not None


def _bad_digest(given: str, body: bytes) -> tuple[int, dict[str, str], str] | None:
    """S3's 400 BadDigest when the SHA256 a request names is not its body's (None when it is)."""
    if base64.b64encode(hashlib.sha256(body).digest()).decode() == given:
        return None
    message = "The SHA256 you specified did not match the calculated checksum."
    return 400, {"Content-Type": "application/xml"}, f"<Error><Code>BadDigest</Code><Message>{message}</Message></Error>"


def _upload_part(self: S3Response) -> Any:
    """UploadPart: a part whose x-amz-checksum-sha256 is not its body's SHA256 is refused (moto stores
    it), and the part keeps its checksum for ListParts (moto drops it)."""
    given = self.headers.get(CHECKSUM_HEADER)
    refused = _bad_digest(given, self.body) if given else None
    if refused is not None:
        return refused
    answer = original("S3Response.upload_part")(self)
    if given:
        upload = self.backend.get_bucket(self.bucket_name).multiparts[self._get_param("uploadId")]
        set_missing(upload.parts[self._get_int_param("partNumber")], servingctl_checksum_sha256=given)
    return answer


def _key_response_put(self: S3Response, query: dict[str, Any], key_name: str) -> Any:
    """PutObject with x-amz-checksum-sha256: refused when it is not the body's SHA256, else kept as the
    object's checksum (moto keeps it only with x-amz-sdk-checksum-algorithm, which a caller that
    computed the value itself does not send)."""
    plain_put = not (query.get("uploadId") or "x-amz-copy-source" in self.headers)
    given = self.headers.get(CHECKSUM_HEADER) if plain_put else None
    refused = _bad_digest(given, self.body) if given else None
    if refused is not None:
        return refused
    answer = original("S3Response._key_response_put")(self, query, key_name)
    if given:
        key = self.backend.get_object(self.bucket_name, key_name)
        if key is not None and not key.checksum_algorithm:
            set_missing(key, checksum_algorithm="SHA256", checksum_value=given, checksum_type="FULL_OBJECT")
    return answer


def _list_parts(self: S3Response) -> Any:
    """ListParts with each part's ChecksumSHA256, as S3 answers for an upload with a checksum algorithm."""
    status, headers, body = original("S3Response.list_parts")(self)
    upload = self.backend.get_bucket(self.bucket_name).multiparts.get(self._get_param("uploadId"))
    if upload is None or status != 200:
        return status, headers, body

    def with_checksum(match: re.Match[str]) -> str:
        part = upload.parts.get(int(match.group(2)))
        checksum = getattr(part, "servingctl_checksum_sha256", None)
        return match.group(0) if not checksum else f"{match.group(1)}<ChecksumSHA256>{checksum}</ChecksumSHA256>{match.group(3)}"

    text = body.decode() if isinstance(body, bytes) else body
    return status, headers, re.sub(r"(<Part>\s*<PartNumber>(\d+)</PartNumber>)(.*?</Part>)", with_checksum, text, flags=re.S)


PATCHES = [
    Patch(
        "S3Backend.get_object",
        S3Backend,
        "get_object",
        ("self", "bucket_name", "key_name", "version_id", "part_number", "return_delete_marker"),
    ),
    # UploadPart checks and keeps the part's SHA256 (BadDigest on a mismatch).
    Patch("S3Response.upload_part", S3Response, "upload_part", ("self",), _upload_part),
    # PutObject checks and keeps the SHA256 its caller computed.
    Patch("S3Response._key_response_put", S3Response, "_key_response_put", ("self", "query", "key_name"), _key_response_put),
    # ListParts names each part's SHA256 (an interrupted upload resumes by them).
    Patch("S3Response.list_parts", S3Response, "list_parts", ("self",), _list_parts),
]

"""`servingctl weights upload DIR --profile NAME`: a model's weights into the S3 location the profile's
prefetch container syncs from (read from its deployed task definition), multipart, resumable and
checksummed.

Every object is uploaded with S3's SHA256 additional checksum: S3 checks each part (and a single
PUT) against it on receipt and keeps the object's checksum (a composite of the parts' for a
multipart upload), which this command computes locally the same way. A file whose object already
carries the same checksum is skipped; one whose checksum differs (a corrupted or other file) is
uploaded again. An interrupted multipart upload is left in S3 and resumed by the next run: its
parts whose checksums match the local parts are kept (ListParts), only the rest are sent. boto3's
transfer manager is not used for the parts because it aborts a multipart upload it cannot finish,
which leaves nothing to resume.

DIR is a Hugging Face cache tree (`models--ORG--NAME`, with snapshots/ and refs/), a cache dir
holding one (`huggingface-cli download --cache-dir DIR`), or a plain model directory
(`--local-dir`), which goes under snapshots/<revision>/. A profile that pins no revision loads the
snapshot refs/main names: an upload without refs/ of its own writes refs/main, last, when S3 has none,
and leaves one naming another snapshot as it is unless `--set-main` (a profile serving now keeps
loading what it loaded).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import math
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servingctl_cli.aws import (
    Aws,
    NotDeployed,
    add_aws_arguments,
    connect_aws,
    describe_stack,
    profile_of,
    profile_task,
    read_registry,
)
from servingctl_cli.client import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, Unreachable
from servingctl_cli.main import summary

MIB = 1024 * 1024
DEFAULT_PART_MIB = 64
# S3's multipart limits: parts of 5 MiB to 5 GiB (the last may be smaller), at most 10,000 parts.
MIN_PART_MIB, MAX_PART_MIB, MAX_PARTS = 5, 5 * 1024, 10_000
MAX_CONCURRENCY = 64


@dataclass(frozen=True)
class Upload:
    """One local file and the key it goes to."""

    path: Path
    key: str
    size: int


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `weights upload`."""
    weights = subparsers.add_parser("weights", help=summary("weights"))
    actions = weights.add_subparsers(dest="action", metavar="ACTION", required=True)
    upload = actions.add_parser("upload", help="upload DIR to the S3 location the profile's task syncs from")
    upload.add_argument(
        "dir", metavar="DIR", help="a Hugging Face cache tree, a cache dir holding it, or a plain model directory"
    )
    upload.add_argument("--profile", required=True, help="the serving profile whose weights these are")
    upload.add_argument("--revision", help="the snapshot a plain model directory is (default: the profile's pinned revision)")
    upload.add_argument(
        "--set-main",
        action="store_true",
        help="point refs/main at this revision even when it names another (what a profile pinning none loads)",
    )
    upload.add_argument(
        "--part-size-mib",
        type=int,
        default=DEFAULT_PART_MIB,
        help=f"multipart part size in MiB, {MIN_PART_MIB}..{MAX_PART_MIB} "
        f"(default {DEFAULT_PART_MIB}; raised for files over {MAX_PARTS} parts)",
    )
    upload.add_argument("--concurrency", type=int, default=8, help=f"parts in flight, 1..{MAX_CONCURRENCY} (default 8)")
    add_aws_arguments(upload)
    upload.set_defaults(func=_upload)


def sha256_b64(data: bytes) -> str:
    """S3's form of a SHA256 checksum (base64 of the digest)."""
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def part_size_for(size: int, part_mib: int) -> int:
    """The part size for a file: part_mib MiB, raised (in whole MiB) so the file fits in 10,000 parts."""
    return max(part_mib * MIB, math.ceil(size / MAX_PARTS / MIB) * MIB)


def read_parts(path: Path, part_size: int, advance: Callable[[int], None]) -> list[str]:
    """The SHA256 (S3's base64 form) of each part of the file."""
    checksums = []
    with path.open("rb") as source:
        while chunk := source.read(part_size):
            checksums.append(sha256_b64(chunk))
            advance(len(chunk))
    return checksums or [sha256_b64(b"")]


def object_checksum(parts: list[str]) -> str:
    """The checksum S3 keeps: a single PUT's SHA256, or the composite of a multipart upload's parts
    (SHA256 of the concatenated part digests, then -N)."""
    if len(parts) == 1:
        return parts[0]
    joined = b"".join(base64.b64decode(p) for p in parts)
    return f"{sha256_b64(joined)}-{len(parts)}"


def _same(stored: str | None, expected: str) -> bool:
    # S3 answers a composite checksum with its -N suffix; compare the digest and, when given, the count.
    if not stored:
        return False
    digest, _, count = stored.partition("-")
    want_digest, _, want_count = expected.partition("-")
    return digest == want_digest and (not count or count == want_count)


def layout(root: Path, tree: str, revision: str | None) -> list[tuple[Path, str]]:
    """(local file, key under the model's tree) for DIR as a cache tree, a cache dir or a model dir."""
    name = tree.rsplit("/", 1)[-1]  # models--ORG--NAME
    if (root / name).is_dir():
        root = root / name
    if (root / "snapshots").is_dir():
        snapshots = sorted(p.name for p in (root / "snapshots").iterdir() if p.is_dir())
        wanted = [revision] if revision else snapshots
        absent = [r for r in wanted if r not in snapshots]
        if absent or not wanted:
            raise ValueError(
                f"DIR: no snapshot {absent[0] if absent else ''} in {root / 'snapshots'} "
                f"(found: {', '.join(snapshots) or 'none'})"
            )
        files = [p for r in wanted for p in sorted((root / "snapshots" / r).rglob("*")) if p.is_file()]
        files += [p for p in sorted((root / "refs").rglob("*")) if p.is_file()] if (root / "refs").is_dir() else []
        # snapshots/ holds symlinks into blobs/: the files are read through them, blobs/ is not uploaded.
        return [(p, p.relative_to(root).as_posix()) for p in files]
    if not revision:
        raise ValueError("--revision: a plain model directory needs the snapshot it is (the profile pins none)")
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and ".cache" not in p.relative_to(root).parts]
    if not files:
        raise ValueError(f"DIR: no files in {root}")
    return [(p, f"snapshots/{revision}/{p.relative_to(root).as_posix()}") for p in files]


class Uploader:
    """Uploads files to one bucket with SHA256 checksums, resuming interrupted multipart uploads."""

    def __init__(self, s3: Any, bucket: str, part_mib: int, concurrency: int, advance: Callable[[int], None]) -> None:
        self.s3, self.bucket, self.part_mib, self.concurrency, self.advance = s3, bucket, part_mib, concurrency, advance

    def stored_checksum(self, key: str) -> tuple[int, str | None] | None:
        """(size, SHA256 checksum) of the object at key, None when there is none."""
        from botocore.exceptions import ClientError

        try:
            head = self.s3.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return int(head["ContentLength"]), head.get("ChecksumSHA256")

    def upload(self, item: Upload, parts: list[str], part_size: int) -> str:
        """Put the file (single PUT or multipart); returns what was done, in words."""
        if len(parts) == 1:
            self.s3.put_object(Bucket=self.bucket, Key=item.key, Body=item.path.read_bytes(), ChecksumSHA256=parts[0])
            self.advance(item.size)
            return "uploaded"
        upload_id, done = self._resumable(item.key)
        kept = {
            n
            for n, (checksum, size, _etag) in done.items()
            if n <= len(parts) and checksum == parts[n - 1] and size == self._part_len(item, n, part_size)
        }
        for number in kept:
            self.advance(self._part_len(item, number, part_size))
        todo = [n for n in range(1, len(parts) + 1) if n not in kept]
        etags: dict[int, str] = {n: done[n][2] for n in kept}
        executor = ThreadPoolExecutor(max_workers=self.concurrency)
        try:
            for number, etag in zip(
                todo, executor.map(lambda n: self._part(item, upload_id, n, part_size, parts[n - 1]), todo), strict=True
            ):
                etags[number] = etag
        except BaseException:
            executor.shutdown(wait=False, cancel_futures=True)  # the upload stays in S3: the next run resumes it
            raise
        executor.shutdown()
        self.s3.complete_multipart_upload(
            Bucket=self.bucket,
            Key=item.key,
            UploadId=upload_id,
            MultipartUpload={
                "Parts": [{"PartNumber": n, "ETag": etags[n], "ChecksumSHA256": parts[n - 1]} for n in sorted(etags)]
            },
        )
        return f"uploaded in {len(parts)} parts" + (f", {len(kept)} already there" if kept else "")

    @staticmethod
    def _part_len(item: Upload, number: int, part_size: int) -> int:
        return min(part_size, item.size - (number - 1) * part_size)

    def _resumable(self, key: str) -> tuple[str, dict[int, tuple[str, int, str]]]:
        """The newest unfinished SHA256 multipart upload of key and its parts (number -> checksum,
        size, ETag), or a new upload."""
        uploads = [
            u
            for page in self.s3.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=key)
            for u in page.get("Uploads", [])
            if u["Key"] == key and u.get("ChecksumAlgorithm") == "SHA256"
        ]
        if not uploads:
            return self.s3.create_multipart_upload(Bucket=self.bucket, Key=key, ChecksumAlgorithm="SHA256")["UploadId"], {}
        upload_id = max(uploads, key=lambda u: u["Initiated"])["UploadId"]
        parts = {
            p["PartNumber"]: (p.get("ChecksumSHA256", ""), int(p["Size"]), p["ETag"])
            for page in self.s3.get_paginator("list_parts").paginate(Bucket=self.bucket, Key=key, UploadId=upload_id)
            for p in page.get("Parts", [])
        }
        return upload_id, parts

    def _part(self, item: Upload, upload_id: str, number: int, part_size: int, checksum: str) -> str:
        with item.path.open("rb") as source:
            source.seek((number - 1) * part_size)
            body = source.read(part_size)
        etag = self.s3.upload_part(
            Bucket=self.bucket, Key=item.key, UploadId=upload_id, PartNumber=number, Body=body, ChecksumSHA256=checksum
        )["ETag"]
        self.advance(len(body))
        return str(etag)


def _progress() -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    console = Console(stderr=True)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not console.is_terminal,
    )


def _usage(message: str) -> int:
    print(f"servingctl weights upload: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _upload(args: argparse.Namespace) -> int:
    if not MIN_PART_MIB <= args.part_size_mib <= MAX_PART_MIB:
        return _usage(
            f"--part-size-mib must be from {MIN_PART_MIB} to {MAX_PART_MIB} (S3's part sizes); got {args.part_size_mib}"
        )
    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        return _usage(f"--concurrency must be from 1 to {MAX_CONCURRENCY}; got {args.concurrency}")
    root = Path(args.dir)
    if not root.is_dir():
        return _usage(f"DIR: {root} is not a directory")
    try:
        aws = connect_aws(args)
        target = _target(aws, args)
    except Unreachable as exc:
        print(f"servingctl weights upload: error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except NotDeployed as exc:
        print(f"servingctl weights upload: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    bucket, tree, pinned = target
    revision = args.revision or pinned
    try:
        files = layout(root, tree, revision)
    except ValueError as exc:
        return _usage(str(exc))
    with tempfile.TemporaryDirectory() as scratch:
        if pinned is None and revision and not any(rel.startswith("refs/") for _, rel in files):
            from botocore.exceptions import BotoCoreError, ClientError

            try:
                current = _stored_main(aws, bucket, tree)
            except (ClientError, BotoCoreError) as exc:  # a refused read, said as S3 said it
                print(f"servingctl weights upload: error: s3://{bucket}/{tree}/refs/main: {exc}", file=sys.stderr)
                return EXIT_FAILED
            if current in (None, revision) or args.set_main:
                ref = Path(scratch) / "main"
                ref.write_text(revision)  # as huggingface_hub writes it: the commit hash, no newline
                files.append((ref, "refs/main"))  # last: it names the snapshot once the snapshot is whole
                print(f"refs/main -> {revision}: profile {args.profile} pins no revision, so it loads this snapshot")
            else:
                print(
                    f"refs/main names {current} and stays: profile {args.profile} pins no revision and keeps loading "
                    f"that snapshot; --set-main points it at {revision}"
                )
        items = [Upload(path, f"{tree}/{rel}", path.stat().st_size) for path, rel in files]
        return _send(aws, bucket, items, args)


def _stored_main(aws: Aws, bucket: str, tree: str) -> str | None:
    """The revision s3://bucket/tree/refs/main names, None when there is none."""
    from botocore.exceptions import ClientError

    try:
        body = aws.client("s3").get_object(Bucket=bucket, Key=f"{tree}/refs/main")["Body"].read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "NoSuchKey":
            return None
        raise
    return str(body.decode().strip())


def _target(aws: Aws, args: argparse.Namespace) -> tuple[str, str, str | None]:
    """(bucket, the model's tree prefix, the pinned revision) the profile's prefetch syncs from."""
    stack = describe_stack(aws, args.stack)
    profile = profile_of(read_registry(aws, stack), args.profile)
    task = profile_task(aws, profile)
    if task.weights_bucket is None or task.weights_prefix is None:
        raise NotDeployed(f'profile {args.profile} loads its weights from the hub (weights_source = "hub"): nothing to upload')
    return task.weights_bucket, task.weights_prefix, profile.serving.revision


def _send(aws: Aws, bucket: str, items: list[Upload], args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    s3 = aws.client("s3", max_pool_connections=max(10, args.concurrency))
    total = sum(i.size for i in items)
    print(
        f"{len(items)} files, {total / 1e9:.2f} GB -> s3://{bucket}/{items[0].key.rsplit('/snapshots/', 1)[0] if items else ''}"
    )
    done = 0
    with _progress() as progress:
        hashing = progress.add_task("checksums", total=total)
        sending = progress.add_task("upload", total=total)
        uploader = Uploader(s3, bucket, args.part_size_mib, args.concurrency, lambda n: progress.advance(sending, n))
        try:
            for item in items:
                part_size = part_size_for(item.size, args.part_size_mib)
                parts = read_parts(item.path, part_size, lambda n: progress.advance(hashing, n))
                expected = object_checksum(parts)
                stored = uploader.stored_checksum(item.key)
                if stored is not None and stored[0] == item.size and _same(stored[1], expected):
                    progress.advance(sending, item.size)
                    print(f"unchanged  {item.key}")
                    done += 1
                    continue
                note = (
                    ""
                    if stored is None
                    else " (the object there had another checksum: replaced)"
                    if stored[1]
                    else " (the object there had no SHA256 checksum: replaced)"
                )
                what = uploader.upload(item, parts, part_size)
                after = uploader.stored_checksum(item.key)
                if after is None or not _same(after[1], expected):
                    print(
                        f"servingctl weights upload: error: {item.key}: "
                        f"S3 keeps checksum {after and after[1]}, expected {expected}",
                        file=sys.stderr,
                    )
                    return EXIT_FAILED
                print(f"{what}  {item.key}{note}")
                done += 1
        except KeyboardInterrupt:
            print(
                f"interrupted: {done} of {len(items)} files complete; "
                "what was sent stays in S3: run the same command again to resume",
                file=sys.stderr,
            )
            return EXIT_INTERRUPTED
        except (ClientError, BotoCoreError) as exc:
            print(f"servingctl weights upload: error: {exc}", file=sys.stderr)
            return EXIT_FAILED
    print(f"done: {done} files in s3://{bucket}, every object's SHA256 checksum equal to the local file's")
    return EXIT_OK

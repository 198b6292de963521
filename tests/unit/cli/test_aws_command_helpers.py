"""The pure parts of `weights`, `logs` and `endpoint`: S3's checksum of an upload, the part size at
S3's 10,000-part limit, where a DIR's files go, --since, and the snippets."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from servingctl_cli.endpoint import snippets
from servingctl_cli.logs import since_ms
from servingctl_cli.weights import MAX_PARTS, MIB, layout, object_checksum, part_size_for, read_parts

TREE = "hf-hub/models--org--model"


def test_composite_checksum_is_s3s(tmp_path: Path) -> None:
    data = bytes(range(256)) * (6 * MIB // 256)
    path = tmp_path / "f"
    path.write_bytes(data)
    parts = read_parts(path, 5 * MIB, lambda n: None)
    digests = [hashlib.sha256(data[: 5 * MIB]).digest(), hashlib.sha256(data[5 * MIB :]).digest()]
    assert object_checksum(parts) == base64.b64encode(hashlib.sha256(b"".join(digests)).digest()).decode() + "-2"
    assert object_checksum(read_parts(path, 8 * MIB, lambda n: None)) == base64.b64encode(hashlib.sha256(data).digest()).decode()


def test_part_size_at_the_part_limit() -> None:
    assert part_size_for(64 * MIB * MAX_PARTS, 64) == 64 * MIB  # exactly 10,000 parts
    assert part_size_for(64 * MIB * MAX_PARTS + 1, 64) == 65 * MIB  # one byte more: the next whole MiB


def test_layout_of_each_dir_kind(tmp_path: Path) -> None:
    model = tmp_path / "plain"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert layout(model, TREE, "r1") == [(model / "config.json", "snapshots/r1/config.json")]
    with pytest.raises(ValueError, match="--revision"):
        layout(model, TREE, None)
    tree = tmp_path / "cache" / "models--org--model"
    (tree / "snapshots" / "r1").mkdir(parents=True)
    (tree / "refs").mkdir()
    (tree / "blobs").mkdir()
    (tree / "blobs" / "abc").write_text("{}")
    (tree / "snapshots" / "r1" / "config.json").symlink_to("../../blobs/abc")
    (tree / "refs" / "main").write_text("r1")
    expected = [(tree / "snapshots/r1/config.json", "snapshots/r1/config.json"), (tree / "refs/main", "refs/main")]
    assert layout(tmp_path / "cache", TREE, "r1") == expected == layout(tree, TREE, "r1")
    with pytest.raises(ValueError, match=r"no snapshot r2 .*\(found: r1\)"):
        layout(tree, TREE, "r2")


def test_since() -> None:
    assert since_ms("10m", 1000.0) == 400_000
    assert since_ms("2026-12-06T05:00:00", 0) == since_ms("2026-12-06T05:00:00+00:00", 0)
    with pytest.raises(ValueError, match="--since must be a duration"):
        since_ms("10 minutes", 0)


def test_snippets_quote_for_the_shell() -> None:
    found = snippets("http://alb", "X-LLM-Profile: it's", "m")
    assert "-H 'X-LLM-Profile: it'\"'\"'s'" in found["curl"]
    compile(found["openai_python"], "snippet", "exec")

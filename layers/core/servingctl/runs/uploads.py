"""A run's own prompts inside the VPC: what `servingctl bench --profile --dataset` uploads (only the
prompts it took from the user's file, as JSONL, whatever the file's format), how the run's input
describes the upload (UploadedDataset: its sha256 and shape, the file's fingerprint), and the
worker's read of it, checked against that description before anything is sent.

Every worker reads the upload and counts its prompts through the server's /tokenize again before its
load (the counts are the server's, and the same on every worker): nothing but the upload is shared.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from servingctl.loadgen.datasets import (
    Dataset,
    DatasetError,
    DatasetPrompt,
    check_usable,
    conversations,
    parse_dataset,
    to_jsonl,
)
from servingctl.runs.matrix import MAX_RUN_PROMPTS, MAX_UPLOAD_BYTES, BenchmarkInput, UploadedDataset
from servingctl.schema.results import DatasetSpec
from servingctl.shared.errors import InvalidInput
from servingctl.store.records import RecordStore, dataset_key

# Special tokens a tokenizer may add to a text (BOS, EOS, ...) beyond one token per UTF-8 byte.
SPECIAL_TOKENS_BOUND = 8


def _from_reference(prompt: DatasetPrompt) -> bool:
    return prompt.reference is not None and prompt.output_tokens is None


def _shape(prompts: list[DatasetPrompt], max_tokens: int, from_dataset: bool) -> dict[str, object]:
    """The upload's shape as UploadedDataset states it: counts, prompt bytes, an output bound, the timestamps' span."""
    grouped = conversations(prompts)
    talks = any(len(g) > 1 for g in grouped)
    outputs = []
    for p in prompts:
        if from_dataset and p.output_tokens is not None:
            outputs.append(p.output_tokens)
        elif from_dataset and p.reference is not None:  # a token is at least one byte, special tokens aside
            outputs.append(len(p.reference.encode()) + SPECIAL_TOKENS_BOUND)
        else:
            outputs.append(max_tokens)
    inputs = [sum(len(content.encode()) for _, content in p.messages) for p in prompts]
    stamps = [p.timestamp_s for p in prompts if p.timestamp_s is not None]
    return {
        "prompts": len(prompts),
        "conversations": len(grouped) if talks else 0,
        "longest_conversation": max(map(len, grouped)) if talks else 0,
        "input_bytes": sum(inputs),
        "max_input_bytes": max(inputs),
        "output_tokens_bound": sum(outputs),
        "max_output_tokens": max(outputs),
        "span_s": max(stamps) - min(stamps) if len(stamps) == len(prompts) else None,
    }


def upload_payload(file: Dataset) -> bytes:
    """The prompts taken from the user's file as the JSONL a run reads (reference answers kept only
    where they give the output length)."""
    if len(file.prompts) > MAX_RUN_PROMPTS:
        raise DatasetError(
            f"{file.fingerprint.source}: {len(file.prompts)} prompts; a run inside the VPC takes at most {MAX_RUN_PROMPTS} "
            "(take fewer with --num-prompts, or run the file from a machine in the VPC with --endpoint)"
        )
    from_dataset = file.fingerprint.output_tokens == "dataset"
    kept = [p if from_dataset and _from_reference(p) else replace(p, reference=None) for p in file.prompts]
    payload = to_jsonl(kept)
    if len(payload) > MAX_UPLOAD_BYTES:
        raise DatasetError(
            f"{file.fingerprint.source}: the {len(file.prompts)} prompts taken are {len(payload)} bytes as JSONL; a run inside "
            f"the VPC takes at most {MAX_UPLOAD_BYTES} (take fewer with --num-prompts)"
        )
    return payload


def describe_upload(file: Dataset, payload: bytes, max_tokens: int) -> UploadedDataset:
    """The run input's description of an upload: its sha256 and shape, and the file's fingerprint (named by its base name)."""
    fingerprint = file.fingerprint.model_copy(update={"source": Path(file.fingerprint.source).name})
    shape = _shape(file.prompts, max_tokens, file.fingerprint.output_tokens == "dataset")
    return UploadedDataset.model_validate(
        {"sha256": hashlib.sha256(payload).hexdigest(), "file": fingerprint.model_dump(), **shape}
    )


def read_upload(records: RecordStore, run_id: str, given: BenchmarkInput) -> Dataset:
    """The run's uploaded prompts, refused (InvalidInput naming the field) when missing, too large,
    not the bytes the input names, or not of the shape it states."""
    described = given.dataset
    if described is None:
        raise InvalidInput("invalid input: dataset: this run has none")
    if given.run_id is None:
        raise InvalidInput("invalid input: run_id: required with a dataset: the run id its prompts were uploaded for")
    key = dataset_key(run_id)
    where = records.uri(key)
    try:
        payload = records.get_bytes(key, MAX_UPLOAD_BYTES)
    except KeyError:
        raise InvalidInput(
            f"invalid input: dataset: nothing uploaded at {where}; upload the prompts first (POST /benchmarks/{run_id}/dataset, "
            "as servingctl bench --profile --dataset does)"
        ) from None
    except ValueError as exc:
        raise InvalidInput(f"invalid input: dataset: {exc}") from None
    digest = hashlib.sha256(payload).hexdigest()
    if digest != described.sha256:
        raise InvalidInput(
            f"invalid input: dataset.sha256: {described.sha256}, but the upload at {where} has {digest}; "
            "upload the prompts again with a new run id"
        )
    from_dataset = described.file.output_tokens == "dataset"
    try:
        dataset = parse_dataset(payload, DatasetSpec(source=where, format="jsonl", output_tokens=described.file.output_tokens))
        check_usable(dataset, api=given.api, mode=given.mode, replay=given.replay_speed is not None)
    except DatasetError as exc:
        raise InvalidInput(f"invalid input: dataset: {where}: {exc}") from None
    shape = _shape(dataset.prompts, given.max_tokens, from_dataset)
    for field, found in shape.items():
        stated = getattr(described, field)
        if stated != found:
            raise InvalidInput(f"invalid input: dataset.{field}: {stated}, but the upload at {where} has {found}")
    return Dataset(dataset.prompts, described.file)

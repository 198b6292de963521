"""The vLLM command line and CUDA-graph capture sizes derived in serving-profile/vllm.tf, evaluated
from the HCL itself for MTP 0..3 (the reference lost 80 % of its throughput on a missing size)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from servingctl.registry.models import ServingOptions



def profile_module(tf, vllm: dict, path: Path | None = None, **inputs):
    """The serving-profile module with the given vllm options and minimal other inputs."""
    values = {
        "name": "m",
        "service_name": "stack-m",
        "served_model_name": "m",
        "image": "vllm/vllm-openai:v0.26.0",
        "model_id": "org/model",
        "vllm": vllm,
        **inputs,
    }
    inputs_fn = {k: (lambda v=v: v) for k, v in values.items()}
    module_dir = path or tf.root_dir / "modules" / "serving-profile"
    return tf.hcleval.Module(module_dir, inputs_fn, tf.hcleval.Config(tf.fake_apply_values))


def capture_problems(sizes: list[int], max_num_seqs: int, mtp: int) -> list[str]:
    """Everything wrong with a capture-size list for max_num_seqs sequences and mtp draft tokens."""
    needed = max_num_seqs * (1 + mtp)
    problems = []
    if needed not in sizes:
        problems.append(f"missing max_num_seqs x (1 + mtp) = {needed}")
    if sizes != sorted(set(sizes)):
        problems.append(f"not strictly ascending: {sizes}")
    if any(s > needed for s in sizes):
        problems.append(f"sizes above {needed} waste graph memory: {sizes}")
    # Every decode batch of n tokens (n <= needed) pads to the next size: at most 2x padding.
    for n in range(1, needed + 1):
        bigger = [s for s in sizes if s >= n]
        if not bigger or min(bigger) > 2 * n:
            problems.append(f"batch of {n} tokens pads to {min(bigger) if bigger else None}")
            break
    return problems


def arg_value(args: list[str], flag: str) -> str | None:
    """The value following flag in an argument list, or None when the flag is absent."""
    return args[args.index(flag) + 1] if flag in args else None


@pytest.mark.parametrize("mtp", [0, 1, 2, 3])
@pytest.mark.parametrize("max_num_seqs", [1, 2, 3, 4, 5, 8, 12, 16, 64, 256])
def test_capture_sizes_cover_every_batch_for_mtp_0_to_3(tf, max_num_seqs: int, mtp: int) -> None:
    module = profile_module(tf, {"max_num_seqs": max_num_seqs, "speculative_tokens": mtp})
    serving = module.local("serving")
    sizes = serving["cudagraph_capture_sizes"]

    assert capture_problems(sizes, max_num_seqs, mtp) == []
    # The same sizes reach vLLM on its command line and the registry's pydantic model accepts them.
    compilation = json.loads(arg_value(serving["args"], "--compilation-config"))
    assert compilation["cudagraph_capture_sizes"] == sizes
    speculative = arg_value(serving["args"], "--speculative-config")
    if mtp:
        assert json.loads(speculative) == {"method": "mtp", "num_speculative_tokens": mtp}
    else:
        assert speculative is None
    ServingOptions.model_validate({k: v for k, v in serving.items() if v is not None})


def test_reference_deepseek_gets_size_8_for_mtp_1_at_4_sequences(tf) -> None:
    sizes = profile_module(tf, {"max_num_seqs": 4, "speculative_tokens": 1}).local("cudagraph_capture_sizes")
    assert sizes == [1, 2, 4, 8]


def test_check_catches_a_formula_that_ignores_speculative_tokens(tf, tmp_path: Path) -> None:
    # The same module with the reference's pitfall (sizes sized to max_num_seqs only) must fail.
    broken = tmp_path / "serving-profile"
    shutil.copytree(tf.root_dir / "modules" / "serving-profile", broken)
    source = (broken / "vllm.tf").read_text()
    assert "var.vllm.max_num_seqs * (1 + var.vllm.speculative_tokens)" in source
    (broken / "vllm.tf").write_text(source.replace("(1 + var.vllm.speculative_tokens)", "1"))

    sizes = profile_module(tf, {"max_num_seqs": 4, "speculative_tokens": 1}, path=broken).local("cudagraph_capture_sizes")
    assert "missing max_num_seqs x (1 + mtp) = 8" in capture_problems(sizes, 4, 1)


def test_command_line_carries_every_typed_option(tf) -> None:
    vllm = {
        "tensor_parallel_size": 2,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 4096,
        "max_model_len": 16384,
        "gpu_memory_utilization": 0.95,
        "kv_cache_dtype": "fp8",
        "tokenizer_mode": "deepseek_v4",
        "reasoning_parser": "deepseek_v4",
        "tool_call_parser": "deepseek_v4",
        "enable_auto_tool_choice": True,
        "trust_remote_code": True,
        "speculative_tokens": 1,
        "extra_args": ["--enable-prefix-caching"],
    }
    args = profile_module(tf, vllm, revision="48bfe38c62be14e8d82f9e3be12fe5d30a2e38c8").local("vllm_args")

    expected = {
        "--model": "org/model",
        "--served-model-name": "m",
        "--port": "8000",
        "--revision": "48bfe38c62be14e8d82f9e3be12fe5d30a2e38c8",
        "--tensor-parallel-size": "2",
        "--max-num-seqs": "4",
        "--max-num-batched-tokens": "4096",
        "--max-model-len": "16384",
        "--gpu-memory-utilization": "0.95",
        "--kv-cache-dtype": "fp8",
        "--tokenizer-mode": "deepseek_v4",
        "--reasoning-parser": "deepseek_v4",
        "--tool-call-parser": "deepseek_v4",
    }
    assert {flag: arg_value(args, flag) for flag in expected} == expected
    for switch in ("--enable-auto-tool-choice", "--trust-remote-code", "--enable-prefix-caching"):
        assert args.count(switch) == 1
    assert json.loads(arg_value(args, "--compilation-config")) == {
        "mode": 0,
        "cudagraph_mode": "FULL_DECODE_ONLY",
        "cudagraph_capture_sizes": [1, 2, 4, 8],
    }


def test_unset_options_leave_their_flags_out(tf) -> None:
    args = profile_module(tf, {}).local("vllm_args")
    for flag in ("--revision", "--max-num-batched-tokens", "--max-model-len", "--kv-cache-dtype",
                 "--tokenizer-mode", "--enable-auto-tool-choice", "--trust-remote-code", "--speculative-config"):  # fmt: skip
        assert flag not in args
    assert arg_value(args, "--tensor-parallel-size") == "1"


def test_task_definition_runs_the_published_command_line(tf) -> None:
    module = profile_module(tf, {"max_num_seqs": 4, "speculative_tokens": 2}, region="us-east-1")
    assert module.local("vllm_container")["command"] == module.local("serving")["args"]

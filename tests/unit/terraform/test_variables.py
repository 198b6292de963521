"""Input validation of the root module: the shipped inputs pass every validation block, and each
kind of bad input is refused by a validation whose message names the field."""

from __future__ import annotations

import copy

import pytest


def failed_validations(tf, values: dict) -> list[str]:
    """Error messages of every root validation that fails for these input values."""
    root = tf.make_root(values)
    messages = []
    for name in root.blocks("variable"):
        for ok, message in root.validations(name):
            if ok is not True:
                messages.append(message)
    return messages


def test_shipped_inputs_pass_every_validation(tf) -> None:
    assert failed_validations(tf, tf.example_values()) == []


def test_defaults_without_tfvars_need_the_pools_and_profiles(tf) -> None:
    # pools and profiles have no defaults: they come from reference.auto.tfvars.
    root = tf.make_root({})
    with pytest.raises(tf.hcleval.HclEvalError, match="variable pools has no value"):
        root.var("pools")


def _mutate(values: dict, path: str, value) -> dict:
    out = copy.deepcopy(values)
    *parents, leaf = path.split(".")
    target = out
    for key in parents:
        target = target[key]
    if value is _DELETE:
        del target[leaf]
    else:
        target[leaf] = value
    return out


_DELETE = object()
DS = "profiles.deepseek-v4-flash"


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (f"{DS}.vllm.tensor_parallel_size", 4, "tensor_parallel_size"),
        (f"{DS}.vllm.speculative_tokens", 9, "speculative_tokens"),
        (f"{DS}.vllm.kv_cache_dtype", "int3", "kv_cache_dtype"),
        (f"{DS}.vllm.max_num_seqs", 0, "max_num_seqs"),
        (f"{DS}.pool", "g9-8gpu", "profiles.*.pool"),
        (f"{DS}.weights_source", "nfs", "weights_source"),
        (f"{DS}.revision", "main", "revision"),
        (f"{DS}.listener_priority", 10, "listener_priority"),
        (f"{DS}.model_load_s", 10, "model_load_s"),
        ("model_weights_bucket", _DELETE, "model_weights_bucket"),
        ("client_cidrs", ["0.0.0.0/0"], "client_cidrs"),
        ("availability_zones", ["us-west-2a", "us-west-2b"], "availability_zones"),
        ("vpc_cidr", "10.0.0.0/24", "vpc_cidr"),
        ("name", "ecs-llm", "name"),
        ("pools.g7e-2gpu.root_volume_gib", 20, "root_volume_gib"),
        ("hub_token_secret_arn", "hf_abc", "hub_token_secret_arn"),
    ],
)
def test_bad_input_is_refused_with_a_message_naming_the_field(tf, path: str, value, field: str) -> None:
    messages = failed_validations(tf, _mutate(tf.example_values(), path, value))
    assert messages, f"{path} = {value!r} passed every validation"
    assert any(field in m for m in messages), messages


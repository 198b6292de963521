# The registry's bound: 50 profiles on 50 pools plan and publish one parameter each (every one in
# the Standard tier's 4 KB) plus the index; one profile or pool more is refused. The pytest suite
# (tests/unit/terraform/test_registry_contract.py) reads the 50 published parameters back with the
# controller's loader.

mock_provider "aws" {
  source          = "./tests/mocks"
  override_during = plan
}

variables {
  pools = { for i in range(50) : format("pool-%02d", i) => { instance_type = "g7e.2xlarge", gpu_count = 1 } }
  profiles = {
    for i in range(50) : format("model-%02d", i) => {
      pool              = format("pool-%02d", i)
      image             = "vllm/vllm-openai:v0.26.0"
      model_id          = format("org/model-%02d", i)
      task_cpu          = 7168
      task_memory_mib   = 57344
      listener_priority = i + 1
      weights_gb        = 16
      vllm              = { max_num_seqs = 4, max_model_len = 8192, kv_cache_dtype = "fp8" }
    }
  }
}

run "fifty_profiles" {
  command = plan

  assert {
    condition     = length(aws_ssm_parameter.registry_profile) == 50 && length(aws_ssm_parameter.registry_pool) == 50
    error_message = "50 profiles and 50 pools must publish one parameter each"
  }
  assert {
    condition     = length(jsondecode(nonsensitive(aws_ssm_parameter.registry_index.value)).profiles) == 50 && length(jsondecode(nonsensitive(aws_ssm_parameter.registry_index.value)).pools) == 50
    error_message = "the index must list the 50 profiles and 50 pools"
  }
  assert {
    condition     = alltrue([for p in concat(values(aws_ssm_parameter.registry_profile), values(aws_ssm_parameter.registry_pool), [aws_ssm_parameter.registry_index]) : length(nonsensitive(p.value)) <= 4096])
    error_message = "every registry parameter must fit the Standard tier (4 KB)"
  }
}

run "fifty_one_profiles" {
  command = plan
  variables {
    profiles = {
      for i in range(51) : format("model-%02d", i) => {
        pool              = format("pool-%02d", i % 50)
        image             = "vllm/vllm-openai:v0.26.0"
        model_id          = "org/model"
        task_cpu          = 7168
        task_memory_mib   = 57344
        listener_priority = i + 1
        vllm              = {}
      }
    }
  }
  expect_failures = [var.profiles]
}

run "fifty_one_pools" {
  command = plan
  variables {
    pools = { for i in range(51) : format("pool-%02d", i) => { instance_type = "g7e.2xlarge", gpu_count = 1 } }
  }
  expect_failures = [var.pools]
}

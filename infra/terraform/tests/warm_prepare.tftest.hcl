# The warm pool's prepare step: a launch lifecycle hook (Warmed:Pending:Wait until the user data
# completes it, ABANDON on timeout), the user data that prepares every profile of the pool and
# completes the hook, the instance role's grants for it, and max_group_prepared_capacity bounding
# the pool. A pool without prepare has none of it. Bad values are refused naming the field.

mock_provider "aws" {
  source          = "./tests/mocks"
  override_during = plan
}

variables {
  model_weights_bucket = "weights"
  pools = {
    p = {
      instance_type = "g7e.2xlarge", gpu_count = 1, cache_throughput_mibps = 1000, cache_iops = 4000
      warm_pool     = { prepare = true, max_group_prepared_capacity = 2, prepare_timeout_s = 2400 }
    }
    q = {
      instance_type = "g7e.2xlarge", gpu_count = 1, cache_throughput_mibps = 1000, cache_iops = 4000
      warm_pool     = {}
    }
  }
  profiles = {
    m = {
      pool              = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096
      listener_priority = 1, weights_gb = 10, vllm = {}
    }
    n = {
      pool              = "q", image = "vllm/vllm-openai:v0.26.0", model_id = "org/other", task_cpu = 1024, task_memory_mib = 4096
      listener_priority = 2, weights_gb = 10, vllm = {}
    }
  }
}

run "prepared_warm_pool" {
  command = plan

  assert {
    condition     = module.pool["p"].prepare.hook.lifecycle_transition == "autoscaling:EC2_INSTANCE_LAUNCHING" && module.pool["p"].prepare.hook.default_result == "ABANDON" && module.pool["p"].prepare.hook.heartbeat_timeout == 2400
    error_message = "a launch hook, ABANDON after the 2400 s prepare timeout, expected: ${jsonencode(module.pool["p"].prepare.hook)}"
  }
  assert {
    condition     = module.pool["p"].warm_pool.max_group_prepared_capacity == 2 && module.pool["p"].warm_pool.pool_state == "Stopped"
    error_message = "the warm pool must be bounded at 2 prepared instances, stopped"
  }
  assert {
    condition     = strcontains(module.pool["p"].launch_template.user_data, "autoscaling/target-lifecycle-state") && strcontains(module.pool["p"].launch_template.user_data, "Warmed:*") && strcontains(module.pool["p"].launch_template.user_data, "complete-lifecycle-action") && strcontains(module.pool["p"].launch_template.user_data, "--lifecycle-hook-name \"self-hosted-llm-poc-p-prepare\"")
    error_message = "the user data must prepare a Warmed:* instance and complete the hook"
  }
  assert {
    condition     = strcontains(module.pool["p"].launch_template.user_data, "s3 sync --only-show-errors \"s3://weights/hf-hub/models--org--model\" \"/var/lib/llm-model-cache/hub/models--org--model\"") && strcontains(module.pool["p"].launch_template.user_data, "--task-definition \"self-hosted-llm-poc-m\"") && strcontains(module.pool["p"].launch_template.user_data, ".servingctl-synced-unpinned")
    error_message = "the prepare step must sync profile m's weights and read its task definition"
  }
  assert {
    condition     = strcontains(module.pool["p"].launch_template.user_data, "VLLM_CACHE_ROOT=/root/.cache/huggingface/vllm-cache") && strcontains(module.pool["p"].launch_template.user_data, "--gpus 1")
    error_message = "the compile run must write the compile cache where the task reads it (VLLM_CACHE_ROOT on the cache volume)"
  }
  assert {
    condition     = !strcontains(module.pool["p"].launch_template.user_data, "models--org--other")
    error_message = "pool p prepares only its own profiles"
  }
  assert {
    condition     = jsonencode(module.pool["p"].prepare.weights_keys) == jsonencode(["hf-hub/models--org--model"])
    error_message = "the instance role may read only the pool's profiles' weights"
  }
  assert {
    condition     = module.pool["q"].prepare.hook == null && !strcontains(module.pool["q"].launch_template.user_data, "complete-lifecycle-action") && module.pool["q"].warm_pool.max_group_prepared_capacity == null
    error_message = "a warm pool without prepare has no hook, no prepare step and no bound"
  }
}

run "prepare_timeout_past_7200" {
  command = plan
  variables {
    pools = { p = { instance_type = "g7e.2xlarge", gpu_count = 1, cache_throughput_mibps = 1000, cache_iops = 4000, warm_pool = { prepare = true, prepare_timeout_s = 7201 } } }
    profiles = {
      m = {
        pool              = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096
        listener_priority = 1, weights_gb = 10, vllm = {}
      }
    }
  }
  expect_failures = [var.pools]
}

run "prepared_capacity_zero" {
  command = plan
  variables {
    pools = { p = { instance_type = "g7e.2xlarge", gpu_count = 1, cache_throughput_mibps = 1000, cache_iops = 4000, warm_pool = { max_group_prepared_capacity = 0 } } }
    profiles = {
      m = {
        pool              = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096
        listener_priority = 1, weights_gb = 10, vllm = {}
      }
    }
  }
  expect_failures = [var.pools]
}

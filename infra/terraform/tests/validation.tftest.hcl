# Bad input is refused at plan time by the variable that owns it. Every run changes one field of
# the valid minimal base below (first run), so a refusal can only come from that field's rule;
# limits are tested at the limit (base) and one past it.

mock_provider "aws" {
  source          = "./tests/mocks"
  override_during = plan
}

variables {
  pools = {
    p = {
      instance_type = "g7e.2xlarge"
      gpu_count     = 1
      # At the gp3 limits: the most throughput, and the fewest IOPS that allow it (0.25 MiB/s per IOPS).
      cache_throughput_mibps = 1000
      cache_iops             = 4000
    }
  }
  profiles = {
    m = {
      pool              = "p"
      image             = "vllm/vllm-openai:v0.26.0"
      model_id          = "org/model"
      task_cpu          = 1024
      task_memory_mib   = 4096
      listener_priority = 1
      weights_gb        = 10
      vllm              = {}
    }
  }
}

run "minimal_base_is_valid" {
  command = plan

  assert {
    # 10 GB at 1000 MiB/s: ceil(9.54) = 10 s per pass; grace = 2 x 10 + 600.
    condition     = module.profile["m"].health_check_grace_s == 620
    error_message = "grace ${module.profile["m"].health_check_grace_s}, expected 620"
  }
}

run "gp3_throughput_over_1000" {
  command = plan
  variables {
    pools = { p = { instance_type = "g7e.2xlarge", gpu_count = 1, cache_throughput_mibps = 1001, cache_iops = 16000 } }
  }
  expect_failures = [var.pools]
}

run "gp3_throughput_under_125" {
  command = plan
  variables {
    pools = { p = { instance_type = "g7e.2xlarge", gpu_count = 1, cache_throughput_mibps = 124, cache_iops = 3000 } }
  }
  expect_failures = [var.pools]
}

run "gp3_iops_over_16000" {
  command = plan
  variables {
    pools = { p = { instance_type = "g7e.2xlarge", gpu_count = 1, cache_throughput_mibps = 1000, cache_iops = 16001 } }
  }
  expect_failures = [var.pools]
}

run "gp3_throughput_over_a_quarter_of_iops" {
  command = plan
  variables {
    pools = { p = { instance_type = "g7e.2xlarge", gpu_count = 1, cache_throughput_mibps = 1000, cache_iops = 3999 } }
  }
  expect_failures = [var.pools]
}

run "tensor_parallel_over_the_pools_gpus" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = { tensor_parallel_size = 2 } } }
  }
  expect_failures = [var.profiles]
}

run "profile_on_an_unknown_pool" {
  command = plan
  variables {
    profiles = { m = { pool = "q", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = {} } }
  }
  expect_failures = [var.profiles]
}

run "neither_weights_gb_nor_model_load_s" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, vllm = {} } }
  }
  expect_failures = [var.profiles]
}

run "weights_gb_zero" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 0, vllm = {} } }
  }
  expect_failures = [var.profiles]
}

run "model_load_s_under_60" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, model_load_s = 59, vllm = {} } }
  }
  expect_failures = [var.profiles]
}

run "speculative_tokens_over_8" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = { speculative_tokens = 9 } } }
  }
  expect_failures = [var.profiles]
}

run "unknown_weights_source" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, weights_source = "nfs", vllm = {} } }
  }
  expect_failures = [var.profiles]
}

run "s3_weights_without_a_bucket" {
  command = plan
  variables {
    model_weights_bucket = null
  }
  expect_failures = [var.profiles]
}

run "reserved_name_prefix" {
  command = plan
  variables {
    name = "ecs-llm"
  }
  expect_failures = [var.name]
}

run "client_cidr_open_to_the_world" {
  command = plan
  variables {
    client_cidrs = ["0.0.0.0/0"]
  }
  expect_failures = [var.client_cidrs]
}

run "zones_of_another_region" {
  command = plan
  variables {
    availability_zones = ["us-west-2a", "us-west-2b"]
  }
  expect_failures = [var.availability_zones]
}

run "max_runtime_below_the_default_lease" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = {}, default_lease_minutes = 120, autostop = { max_runtime_minutes = 119 } } }
  }
  expect_failures = [var.profiles]
}

run "task_cpu_under_256" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 255, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = {} } }
  }
  expect_failures = [var.profiles]
}

run "task_cpu_over_196608" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 196609, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = {} } }
  }
  expect_failures = [var.profiles]
}

run "max_model_len_zero" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = { max_model_len = 0 } } }
  }
  expect_failures = [var.profiles]
}

run "default_lease_over_7_days" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = {}, default_lease_minutes = 10081, max_lease_minutes = 44640 } }
  }
  expect_failures = [var.profiles]
}

run "idle_window_under_5" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = {}, idle = { window_minutes = 4 } } }
  }
  expect_failures = [var.profiles]
}

run "idle_window_over_1440" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = {}, idle = { window_minutes = 1441 } } }
  }
  expect_failures = [var.profiles]
}

run "start_task_timeout_zero" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = {}, start = { task_timeout_s = 0 } } }
  }
  expect_failures = [var.profiles]
}

run "schedule_time_past_23_59" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = {}, schedule = { periods = [{ begin_time = "24:00" }] } } }
  }
  expect_failures = [var.profiles]
}

run "schedule_unknown_weekday" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = {}, schedule = { periods = [{ weekdays = ["mon", "monday"] }] } } }
  }
  expect_failures = [var.profiles]
}

run "schedule_month_day_32" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = {}, schedule = { periods = [{ month_days = [1, 32] }] } } }
  }
  expect_failures = [var.profiles]
}

run "schedule_unknown_override" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = {}, schedule = { override = "paused", periods = [{}] } } }
  }
  expect_failures = [var.profiles]
}

run "schedule_without_periods" {
  command = plan
  variables {
    profiles = { m = { pool = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096, listener_priority = 1, weights_gb = 10, vllm = {}, schedule = { periods = [] } } }
  }
  expect_failures = [var.profiles]
}

# Capacity fallback: at most 3 alternates of the primary's GPU shape.
run "three_alternates_of_the_same_shape" {
  command = plan
  variables {
    pools = { p = { instance_type = "g6e.xlarge", gpu_count = 1, alternate_instance_types = ["g6e.2xlarge", "g6e.4xlarge", "g6e.8xlarge"], cache_throughput_mibps = 1000, cache_iops = 4000 } }
  }
  assert {
    condition     = [for a in local.registry.pools["p"].alternates : a.instance_type] == ["g6e.2xlarge", "g6e.4xlarge", "g6e.8xlarge"]
    error_message = "three alternates must reach the registry in order"
  }
}

run "four_alternates" {
  command = plan
  variables {
    pools = { p = { instance_type = "g6e.xlarge", gpu_count = 1, alternate_instance_types = ["g6e.2xlarge", "g6e.4xlarge", "g6e.8xlarge", "g6e.16xlarge"] } }
  }
  expect_failures = [var.pools]
}

run "alternate_of_another_gpu_memory" {
  command = plan
  variables {
    pools = { p = { instance_type = "g7e.2xlarge", gpu_count = 1, alternate_instance_types = ["g6e.2xlarge"] } }
  }
  expect_failures = [var.pools]
}

run "gpu_count_unlike_the_shape" {
  command = plan
  variables {
    pools = { p = { instance_type = "g7e.12xlarge", gpu_count = 1 } }
  }
  expect_failures = [var.pools]
}

run "warm_pool_min_size_1" {
  command = plan
  variables {
    pools = { p = { instance_type = "g7e.2xlarge", gpu_count = 1, warm_pool = { min_size = 1, reuse_on_scale_in = true }, cache_throughput_mibps = 1000, cache_iops = 4000 } }
  }
  assert {
    condition     = module.pool["p"].warm_pool.min_size == 1 && one(module.pool["p"].warm_pool.instance_reuse_policy).reuse_on_scale_in == true
    error_message = "warm_pool.min_size 1 with reuse on scale-in must reach the ASG"
  }
}

run "warm_pool_min_size_2" {
  command = plan
  variables {
    pools = { p = { instance_type = "g7e.2xlarge", gpu_count = 1, warm_pool = { min_size = 2 } } }
  }
  expect_failures = [var.pools]
}

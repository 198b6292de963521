# Every limit the profile validations enforce, at the limit: two profiles, one at the lower bounds
# and one at the upper, must plan, and the registry they publish must carry those values. The pytest
# suite (tests/unit/terraform/test_registry_contract.py) feeds this run's registry to the
# controller's loader: what Terraform accepts at its limits, the controller accepts too.

mock_provider "aws" {
  source          = "./tests/mocks"
  override_during = plan
}

variables {
  pools = { p = { instance_type = "g7e.2xlarge", gpu_count = 1 } }
  profiles = {
    low = {
      pool                  = "p"
      image                 = "vllm/vllm-openai:v0.26.0"
      model_id              = "org/model"
      task_cpu              = 256
      task_memory_mib       = 512
      listener_priority     = 1
      model_load_s          = 60
      load_allowance_s      = 0
      vllm                  = { max_num_seqs = 1, max_num_batched_tokens = 1, max_model_len = 1, speculative_tokens = 0 }
      idle                  = { window_minutes = 5 }
      default_lease_minutes = 5
      max_lease_minutes     = 5
      autostop              = { warning_minutes = 1, drain_minutes = 0, max_runtime_minutes = 5, max_session_usd = 0.01 }
      start                 = { capacity_timeout_s = 1, task_timeout_s = 1, health_timeout_s = 1, max_task_failures = 1 }
      schedule = {
        override = "stopped"
        enforced = true
        periods  = [{ begin_time = "00:00", end_time = "23:59", weekdays = ["mon", "sun"], month_days = [1, 31] }]
      }
    }
    high = {
      pool              = "p"
      image             = "vllm/vllm-openai:v0.26.0"
      model_id          = "org/model"
      task_cpu          = 196608
      task_memory_mib   = 4096
      listener_priority = 50000
      # The largest checkpoint; its derived grace period would pass ECS's 7200 s, so it is set.
      weights_gb            = 8192
      model_load_s          = 7200
      load_allowance_s      = 7200
      vllm                  = { max_num_seqs = 1024, speculative_tokens = 8, gpu_memory_utilization = 0.98 }
      idle                  = { window_minutes = 1440 }
      default_lease_minutes = 10080
      max_lease_minutes     = 44640
      autostop              = { warning_minutes = 1440, drain_minutes = 120, max_runtime_minutes = 44640, max_session_usd = 1000000 }
      schedule              = { override = "running", periods = [{}] }
    }
  }
}

run "registry_limits" {
  command = plan

  assert {
    condition     = module.profile["low"].task_definition.cpu == "256" && module.profile["high"].task_definition.cpu == "196608"
    error_message = "task CPU at 256 and 196608 units must reach the task definitions"
  }
  assert {
    condition     = local.registry.profiles["low"].schedule.enforced == true && local.registry.profiles["low"].schedule.override == "stopped" && local.registry.profiles["high"].schedule.enforced == false
    error_message = "the registry must carry each schedule's override and enforced flag: ${jsonencode(local.registry.profiles["low"].schedule)}"
  }
  assert {
    condition     = local.registry.profiles["low"].idle.window_minutes == 5 && local.registry.profiles["high"].idle.window_minutes == 1440 && local.registry.profiles["high"].default_lease_minutes == 10080
    error_message = "idle windows and leases at their limits must reach the registry"
  }
  assert {
    condition     = local.registry.profiles["low"].limits.max_start_deadline_s == 7200 && local.registry.profiles["high"].limits.max_start_deadline_s == max(values(local.start_deadlines["high"])...)
    error_message = "a model whose derived start deadlines pass the controller's 2 h must raise its start limit to them: ${jsonencode(local.registry.profiles["high"].limits)}"
  }
}

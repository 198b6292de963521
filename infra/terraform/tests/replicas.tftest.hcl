# Replicas: a profile with max_replicas above 1 gets ECS service auto scaling (a scalable target
# resting at 0..0, which the controller raises while the profile runs, and a target tracking policy
# on the chosen per-replica metric); its pool's group may grow to one instance per replica; a
# profile of one replica gets neither. Bad bounds are refused naming the field.

mock_provider "aws" {
  source          = "./tests/mocks"
  override_during = plan
}

variables {
  model_weights_bucket = "weights"
  pools = {
    p = { instance_type = "g7e.2xlarge", gpu_count = 1, cache_throughput_mibps = 1000, cache_iops = 4000, managed_termination_protection = true }
    q = { instance_type = "g7e.2xlarge", gpu_count = 1, cache_throughput_mibps = 1000, cache_iops = 4000 }
  }
  profiles = {
    m = {
      pool              = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096
      listener_priority = 1, weights_gb = 10, vllm = { max_num_seqs = 8 }
      min_replicas      = 2, max_replicas = 4
    }
    one = {
      pool              = "q", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096
      listener_priority = 2, weights_gb = 10, vllm = {}
    }
  }
}

run "requests_per_replica_target_tracking" {
  command = plan

  assert {
    condition     = module.profile["m"].replicas.target.scalable_dimension == "ecs:service:DesiredCount" && module.profile["m"].replicas.target.min_capacity == 0 && module.profile["m"].replicas.target.max_capacity == 0
    error_message = "the scalable target must be the service's desired count, resting at 0..0"
  }
  assert {
    condition     = endswith(module.profile["m"].replicas.target.resource_id, "/${module.profile["m"].service_name}") && startswith(module.profile["m"].replicas.target.resource_id, "service/")
    error_message = "resource_id must be service/<cluster>/<service>, got ${module.profile["m"].replicas.target.resource_id}"
  }
  assert {
    condition     = module.profile["m"].replicas.policy.policy_type == "TargetTrackingScaling"
    error_message = "target tracking expected"
  }
  assert {
    # The default target: a full batch (vllm.max_num_seqs) per replica.
    condition     = one(module.profile["m"].replicas.policy.target_tracking_scaling_policy_configuration).target_value == 8
    error_message = "target value must default to max_num_seqs (8)"
  }
  assert {
    condition     = one(one(module.profile["m"].replicas.policy.target_tracking_scaling_policy_configuration).customized_metric_specification).metric_name == "RequestsPerReplica" && one(one(module.profile["m"].replicas.policy.target_tracking_scaling_policy_configuration).customized_metric_specification).namespace == "servingctl" && one(one(one(module.profile["m"].replicas.policy.target_tracking_scaling_policy_configuration).customized_metric_specification).dimensions).value == "m"
    error_message = "the policy must track servingctl/RequestsPerReplica of profile m"
  }
  assert {
    condition     = length(one(module.profile["m"].replicas.policy.target_tracking_scaling_policy_configuration).predefined_metric_specification) == 0
    error_message = "no predefined metric with requests-per-replica"
  }
  assert {
    condition     = module.pool["p"].capacity_provider.asg.max_size == 4 && module.pool["q"].capacity_provider.asg.max_size == 1
    error_message = "pool p's group must reach max_replicas (4) instances, q's stays at 1"
  }
  assert {
    condition     = module.profile["one"].replicas.target == null && module.profile["one"].replicas.policy == null
    error_message = "a profile of one replica has no service auto scaling"
  }
  assert {
    condition     = local.registry.profiles["m"].min_replicas == 2 && local.registry.profiles["m"].max_replicas == 4 && local.registry.profiles["one"].min_replicas == 1
    error_message = "the registry must publish the replica bounds"
  }
}

run "alb_request_count_per_target" {
  command = plan
  variables {
    profiles = {
      m = {
        pool              = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096
        listener_priority = 1, weights_gb = 10, vllm = {}
        max_replicas      = 16, scaling_metric = "alb-request-count", scaling_target = 120
      }
    }
  }
  assert {
    condition     = one(one(module.profile["m"].replicas.policy.target_tracking_scaling_policy_configuration).predefined_metric_specification).predefined_metric_type == "ALBRequestCountPerTarget" && one(module.profile["m"].replicas.policy.target_tracking_scaling_policy_configuration).target_value == 120
    error_message = "ALBRequestCountPerTarget at 120 expected"
  }
  assert {
    condition     = length(one(module.profile["m"].replicas.policy.target_tracking_scaling_policy_configuration).customized_metric_specification) == 0 && module.pool["p"].capacity_provider.asg.max_size == 16
    error_message = "no custom metric with alb-request-count; the group reaches 16"
  }
}

run "max_replicas_past_16" {
  command = plan
  variables {
    profiles = {
      m = {
        pool              = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096
        listener_priority = 1, weights_gb = 10, vllm = {}, max_replicas = 17
      }
    }
  }
  expect_failures = [var.profiles]
}

run "min_replicas_zero" {
  command = plan
  variables {
    profiles = {
      m = {
        pool              = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096
        listener_priority = 1, weights_gb = 10, vllm = {}, min_replicas = 0, max_replicas = 2
      }
    }
  }
  expect_failures = [var.profiles]
}

run "min_above_max" {
  command = plan
  variables {
    profiles = {
      m = {
        pool              = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096
        listener_priority = 1, weights_gb = 10, vllm = {}, min_replicas = 3, max_replicas = 2
      }
    }
  }
  expect_failures = [var.profiles]
}

run "alb_request_count_needs_a_target" {
  command = plan
  variables {
    profiles = {
      m = {
        pool              = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096
        listener_priority = 1, weights_gb = 10, vllm = {}, max_replicas = 2, scaling_metric = "alb-request-count"
      }
    }
  }
  expect_failures = [var.profiles]
}

run "replicas_need_termination_protection" {
  command = plan
  variables {
    pools = { p = { instance_type = "g7e.2xlarge", gpu_count = 1, cache_throughput_mibps = 1000, cache_iops = 4000 } }
    profiles = {
      m = {
        pool              = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096
        listener_priority = 1, weights_gb = 10, vllm = {}, max_replicas = 2
      }
    }
  }
  expect_failures = [var.profiles]
}

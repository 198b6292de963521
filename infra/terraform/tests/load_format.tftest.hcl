# Weights loaded two ways, per profile: sync (the prefetch container syncs the Hugging Face cache
# tree to the volume, vLLM loads the model id offline from there) and runai_streamer (no prefetch:
# vLLM streams the pinned revision's snapshot from S3 with --load-format runai_streamer, with the
# task role's credentials in the region). The task definition's command and environment of each.

mock_provider "aws" {
  source          = "./tests/mocks"
  override_during = plan
}

variables {
  model_weights_bucket = "weights"
  pools = {
    p = { instance_type = "g7e.2xlarge", gpu_count = 1, cache_throughput_mibps = 1000, cache_iops = 4000, warm_pool = { prepare = true } }
  }
  profiles = {
    synced = {
      pool              = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/model", task_cpu = 1024, task_memory_mib = 4096
      listener_priority = 1, weights_gb = 10, vllm = {}, revision = "0123456789abcdef0123456789abcdef01234567"
    }
    streamed = {
      pool              = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/big", task_cpu = 1024, task_memory_mib = 4096
      listener_priority = 2, weights_gb = 10, vllm = {}, revision = "89abcdef0123456789abcdef0123456789abcdef"
      load_format       = "runai_streamer"
    }
  }
}

run "sync_and_streamer" {
  command = plan

  assert {
    condition     = [for c in module.profile["synced"].task_definition.containers : c.name] == ["prefetch-weights", "vllm"] && [for c in module.profile["streamed"].task_definition.containers : c.name] == ["vllm"]
    error_message = "sync keeps the prefetch container; the streamer has none"
  }
  assert {
    condition     = slice(one([for c in module.profile["synced"].task_definition.containers : c.command if c.name == "vllm"]), 0, 2) == ["--model", "org/model"] && !contains(one([for c in module.profile["synced"].task_definition.containers : c.command if c.name == "vllm"]), "--load-format")
    error_message = "sync loads the model id from the volume with vLLM's default loader"
  }
  assert {
    condition     = slice(one([for c in module.profile["streamed"].task_definition.containers : c.command if c.name == "vllm"]), 0, 2) == ["--model", "s3://weights/hf-hub/models--org--big/snapshots/89abcdef0123456789abcdef0123456789abcdef"]
    error_message = "the streamer's model is the revision's snapshot in the weights bucket"
  }
  assert {
    condition     = contains(one([for c in module.profile["streamed"].task_definition.containers : c.command if c.name == "vllm"]), "runai_streamer") && !contains(one([for c in module.profile["streamed"].task_definition.containers : c.command if c.name == "vllm"]), "--revision")
    error_message = "--load-format runai_streamer, and no --revision (the snapshot is the revision)"
  }
  assert {
    condition     = contains(one([for c in module.profile["streamed"].task_definition.containers : c.environment if c.name == "vllm"]), { name = "AWS_REGION", value = "us-east-1" }) && contains(one([for c in module.profile["streamed"].task_definition.containers : c.environment if c.name == "vllm"]), { name = "HF_HUB_OFFLINE", value = "1" })
    error_message = "the streamer runs offline from the hub, with the region for its S3 client"
  }
  assert {
    condition     = !contains([for e in one([for c in module.profile["synced"].task_definition.containers : c.environment if c.name == "vllm"]) : e.name], "AWS_REGION")
    error_message = "sync's vLLM needs no S3 client"
  }
  assert {
    # The streamer reads S3 with the task role's credentials: without the read it gets AccessDenied.
    condition     = module.profile["streamed"].reads_weights_from_s3 && module.profile["synced"].reads_weights_from_s3
    error_message = "the task role reads the weights for both load formats"
  }
  assert {
    condition     = module.profile["streamed"].serving.load_format == "runai_streamer" && module.profile["synced"].serving.load_format == "sync"
    error_message = "the registry records each profile's load format"
  }
  assert {
    # The warm pool's prepare step syncs only what a task reads from the volume.
    condition     = jsonencode(module.pool["p"].prepare.weights_keys) == jsonencode(["hf-hub/models--org--model"])
    error_message = "the prepare step syncs the synced profile's weights only"
  }
}

run "streamer_needs_a_revision" {
  command = plan
  variables {
    profiles = {
      streamed = {
        pool              = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/big", task_cpu = 1024, task_memory_mib = 4096
        listener_priority = 2, weights_gb = 10, vllm = {}, load_format = "runai_streamer"
      }
    }
  }
  expect_failures = [var.profiles]
}

run "unknown_load_format" {
  command = plan
  variables {
    profiles = {
      streamed = {
        pool              = "p", image = "vllm/vllm-openai:v0.26.0", model_id = "org/big", task_cpu = 1024, task_memory_mib = 4096
        listener_priority = 2, weights_gb = 10, vllm = {}, load_format = "tensorizer", revision = "89abcdef0123456789abcdef0123456789abcdef"
      }
    }
  }
  expect_failures = [var.profiles]
}

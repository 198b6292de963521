# The reference deployment as a user plans it: reference.auto.tfvars (loaded automatically) plus
# the example's values (the pytest suite runs this in a copy with `cp terraform.tfvars.example
# terraform.tfvars`; by hand, -var-file=terraform.tfvars.example plans the same, the two files
# setting different variables). The mock provider answers at plan time, so every value below is
# the planned one.

mock_provider "aws" {
  source          = "./tests/mocks"
  override_during = plan
}

run "reference" {
  command = plan

  # One task definition per profile, each reserving the profile's GPUs, in awsvpc mode (the mode
  # ECS_AWSVPC_BLOCK_IMDS protects).
  assert {
    condition     = length(module.profile) == 2 && length(module.pool) == 2
    error_message = "expected the two reference profiles and pools, got ${jsonencode(keys(module.profile))} and ${jsonencode(keys(module.pool))}"
  }
  assert {
    condition     = one([for c in module.profile["deepseek-v4-flash"].task_definition.containers : c.resourceRequirements if c.name == "vllm"]) == [{ type = "GPU", value = "2" }]
    error_message = "deepseek-v4-flash's vllm container must reserve 2 GPUs"
  }
  assert {
    condition     = one([for c in module.profile["nemotron-nano"].task_definition.containers : c.resourceRequirements if c.name == "vllm"]) == [{ type = "GPU", value = "1" }]
    error_message = "nemotron-nano's vllm container must reserve 1 GPU"
  }
  assert {
    condition     = alltrue([for p in module.profile : p.task_definition.network_mode == "awsvpc"])
    error_message = "the model servers run in awsvpc mode (ECS_AWSVPC_BLOCK_IMDS applies to it)"
  }
  assert {
    condition     = module.profile["deepseek-v4-flash"].task_definition.cpu == "45056" && module.profile["deepseek-v4-flash"].task_definition.memory == "458752"
    error_message = "deepseek-v4-flash task size must be 45056 CPU units / 458752 MiB"
  }

  # Weights from S3: the prefetch container syncs this model's tree and vLLM waits for it, offline.
  assert {
    condition     = [for c in module.profile["deepseek-v4-flash"].task_definition.containers : c.name] == ["prefetch-weights", "vllm"]
    error_message = "with S3 weights the task runs prefetch-weights, then vllm"
  }
  assert {
    condition     = strcontains(module.profile["deepseek-v4-flash"].task_definition.containers[0].command[0], "aws s3 sync --only-show-errors s3://my-llm-weights-123456789012/hf-hub/models--nvidia--DeepSeek-V4-Flash-NVFP4 /root/.cache/huggingface/hub/models--nvidia--DeepSeek-V4-Flash-NVFP4")
    error_message = "the prefetch must sync the model's tree from the example bucket: ${module.profile["deepseek-v4-flash"].task_definition.containers[0].command[0]}"
  }
  assert {
    condition     = module.profile["deepseek-v4-flash"].task_definition.containers[1].dependsOn == [{ containerName = "prefetch-weights", condition = "SUCCESS" }]
    error_message = "vllm must start only after a successful prefetch"
  }
  assert {
    condition     = contains(module.profile["deepseek-v4-flash"].task_definition.containers[1].environment, { name = "HF_HUB_OFFLINE", value = "1" })
    error_message = "with prefetched weights vLLM runs with HF_HUB_OFFLINE=1"
  }
  assert {
    condition     = module.profile["deepseek-v4-flash"].task_definition.containers[1].secrets == [{ name = "HF_TOKEN", valueFrom = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token-AbCdEf" }]
    error_message = "the example's hub token secret must reach vLLM as HF_TOKEN"
  }

  # The vLLM command line is the registry's, and for deepseek the reference's exact one.
  assert {
    condition     = alltrue([for name, p in module.profile : one([for c in p.task_definition.containers : c.command if c.name == "vllm"]) == local.registry.profiles[name].serving.args])
    error_message = "every task definition must run the command line the registry publishes"
  }
  assert {
    # Flags in Terraform's map order (sorted); the values are the reference deployment's.
    condition = local.registry.profiles["deepseek-v4-flash"].serving.args == [
      "--model", "nvidia/DeepSeek-V4-Flash-NVFP4", "--served-model-name", "deepseek-v4-flash", "--host", "0.0.0.0", "--port", "8000",
      "--gpu-memory-utilization", "0.95", "--kv-cache-dtype", "fp8", "--max-model-len", "16384", "--max-num-batched-tokens", "4096",
      "--max-num-seqs", "4", "--reasoning-parser", "deepseek_v4", "--revision", "48bfe38c62be14e8d82f9e3be12fe5d30a2e38c8",
      "--tensor-parallel-size", "2", "--tokenizer-mode", "deepseek_v4", "--tool-call-parser", "deepseek_v4",
      "--enable-auto-tool-choice", "--trust-remote-code",
      "--compilation-config", "{\"cudagraph_capture_sizes\":[1,2,4,8],\"cudagraph_mode\":\"FULL_DECODE_ONLY\",\"mode\":0}",
      "--speculative-config", "{\"method\":\"mtp\",\"num_speculative_tokens\":1}",
    ]
    error_message = "deepseek-v4-flash's command line differs from the reference: ${jsonencode(local.registry.profiles["deepseek-v4-flash"].serving.args)}"
  }

  assert {
    condition     = local.registry.profiles["deepseek-v4-flash"].autostop.warning_minutes == 15 && local.registry.profiles["deepseek-v4-flash"].autostop.drain_minutes == 10 && local.registry.profiles["deepseek-v4-flash"].autostop.max_runtime_minutes == null && local.registry.profiles["deepseek-v4-flash"].autostop.max_session_usd == null
    error_message = "the registry carries each profile's autostop settings (defaults here)"
  }
  # The registry in SSM: one parameter per pool and profile and the index, under /<name>/registry.
  assert {
    condition     = alltrue([for name, p in aws_ssm_parameter.registry_profile : nonsensitive(p.value) == jsonencode(local.registry.profiles[name]) && p.name == "/self-hosted-llm-poc/registry/profiles/${name}"]) && alltrue([for name, p in aws_ssm_parameter.registry_pool : nonsensitive(p.value) == jsonencode(local.registry.pools[name]) && p.name == "/self-hosted-llm-poc/registry/pools/${name}"])
    error_message = "each registry parameter must store its pool or profile of local.registry, under /self-hosted-llm-poc/registry/"
  }
  assert {
    condition     = aws_ssm_parameter.registry_index.name == "/self-hosted-llm-poc/registry/index" && jsondecode(nonsensitive(aws_ssm_parameter.registry_index.value)) == { schema_version = 1, region = "us-east-1", pools = ["g7e-1gpu", "g7e-2gpu"], profiles = ["deepseek-v4-flash", "nemotron-nano"] }
    error_message = "the index must name every pool and profile: ${nonsensitive(aws_ssm_parameter.registry_index.value)}"
  }

  # One listener rule per profile, matching X-LLM-Profile: <profile>.
  assert {
    condition     = alltrue([for name, p in module.profile : p.routing.header.http_header_name == "X-LLM-Profile" && p.routing.header.values == toset([name])])
    error_message = "each profile's listener rule must match X-LLM-Profile: <profile>"
  }
  assert {
    condition     = module.profile["nemotron-nano"].routing.priority == 10 && module.profile["deepseek-v4-flash"].routing.priority == 20
    error_message = "listener rule priorities must be the profiles' (10 and 20)"
  }

  # Launch templates: IMDSv2 only with hop limit 1, ECS agent config with the IMDS block, gp3 cache.
  assert {
    condition     = alltrue([for p in module.pool : p.launch_template.metadata_options.http_tokens == "required" && p.launch_template.metadata_options.http_put_response_hop_limit == 1 && p.launch_template.metadata_options.http_endpoint == "enabled"])
    error_message = "launch templates must require IMDSv2 with hop limit 1"
  }
  assert {
    condition     = alltrue([for p in module.pool : strcontains(p.launch_template.user_data, "\nECS_AWSVPC_BLOCK_IMDS=true\n")])
    error_message = "the ECS agent must block IMDS for awsvpc tasks (ECS_AWSVPC_BLOCK_IMDS=true)"
  }
  assert {
    condition     = alltrue([for name, p in module.pool : strcontains(p.launch_template.user_data, "ECS_CLUSTER=self-hosted-llm-poc\nECS_ENABLE_GPU_SUPPORT=true\nECS_CONTAINER_INSTANCE_TAGS={\"servingctl:pool\":\"${name}\"}\n")])
    error_message = "user data must register the instance to the cluster with GPU support and its pool tag"
  }
  assert {
    condition     = !strcontains(module.pool["g7e-2gpu"].launch_template.user_data, "mkfs")
    error_message = "the instance-store mount appears only when the pool asks for it"
  }
  assert {
    condition     = module.pool["g7e-2gpu"].launch_template.root_volume.volume_type == "gp3" && module.pool["g7e-2gpu"].launch_template.root_volume.volume_size == 400 && module.pool["g7e-2gpu"].launch_template.root_volume.throughput == 1000 && module.pool["g7e-2gpu"].launch_template.root_volume.iops == 16000 && module.pool["g7e-2gpu"].launch_template.root_volume.encrypted == "true"
    error_message = "g7e-2gpu's root volume must be 400 GiB encrypted gp3 at 1000 MiB/s and 16000 IOPS: ${jsonencode(module.pool["g7e-2gpu"].launch_template.root_volume)}"
  }

  # Warm capacity: g7e-2gpu keeps one Stopped instance (reuse on scale-in off, as ECS documents),
  # its agent waits for the warm pool check; g7e-1gpu has none and falls back to larger g7e sizes.
  assert {
    condition     = module.pool["g7e-2gpu"].warm_pool.pool_state == "Stopped" && module.pool["g7e-2gpu"].warm_pool.min_size == 0 && one(module.pool["g7e-2gpu"].warm_pool.instance_reuse_policy).reuse_on_scale_in == false && module.pool["g7e-1gpu"].warm_pool == null
    error_message = "g7e-2gpu must have a Stopped warm pool without reuse on scale-in, g7e-1gpu none: ${jsonencode(module.pool["g7e-2gpu"].warm_pool)}"
  }
  assert {
    condition     = strcontains(module.pool["g7e-2gpu"].launch_template.user_data, "\nECS_WARM_POOLS_CHECK=true\n") && !strcontains(module.pool["g7e-1gpu"].launch_template.user_data, "\nECS_WARM_POOLS_CHECK=true")
    error_message = "ECS_WARM_POOLS_CHECK=true belongs in the user data of pools with a warm pool only"
  }
  assert {
    condition     = [for a in local.registry.pools["g7e-1gpu"].alternates : a.instance_type] == ["g7e.4xlarge", "g7e.8xlarge"] && local.registry.pools["g7e-2gpu"].alternates == []
    error_message = "the registry must list g7e-1gpu's alternates in order: ${jsonencode(local.registry.pools["g7e-1gpu"].alternates)}"
  }
  assert {
    condition     = jsonencode(local.registry.pools["g7e-2gpu"].warm_pool) == jsonencode({ max_group_prepared_capacity = null, min_size = 0, pool_state = "Stopped", prepare = false, prepare_timeout_s = 3600, reuse_on_scale_in = false }) && local.registry.pools["g7e-2gpu"].volume == { size_gib = 400, throughput_mibps = 1000, iops = 16000 } && local.registry.pools["g7e-2gpu"].gpu_memory_gib == 192
    error_message = "the registry must publish g7e-2gpu's warm pool, volume and GPU memory: ${jsonencode(local.registry.pools["g7e-2gpu"])}"
  }
  assert {
    condition     = alltrue([for p in module.profile : contains(one([for c in p.task_definition.containers : c.environment if c.name == "vllm"]), { name = "VLLM_CACHE_ROOT", value = "/root/.cache/huggingface/vllm-cache" })])
    error_message = "vLLM's compile cache (VLLM_CACHE_ROOT) must live on the cache volume"
  }
  assert {
    condition     = strcontains(module.profile["deepseek-v4-flash"].task_definition.containers[0].command[0], "; if [ -f /root/.cache/huggingface/hub/models--nvidia--DeepSeek-V4-Flash-NVFP4/.servingctl-synced-48bfe38c62be14e8d82f9e3be12fe5d30a2e38c8 ]; then")
    error_message = "the prefetch must skip weights a warm volume already holds (marker of the revision)"
  }
  assert {
    condition     = startswith(module.profile["deepseek-v4-flash"].task_definition.containers[0].command[0], "echo 'servingctl prefetch: syncing ") && endswith(module.profile["deepseek-v4-flash"].task_definition.containers[0].command[0], "echo 'servingctl prefetch: done'")
    error_message = "the prefetch must print the lines the start timeline reads at its begin and end"
  }

  # Capacity providers: managed scaling one instance at a time, termination protection off.
  assert {
    condition     = alltrue([for p in module.pool : one(p.capacity_provider.auto_scaling_group_provider.managed_scaling) == { status = "ENABLED", target_capacity = 100, minimum_scaling_step_size = 1, maximum_scaling_step_size = 1, instance_warmup_period = 300 }])
    error_message = "managed scaling must be ENABLED, target 100, step 1..1, warm-up 300 s"
  }
  assert {
    condition     = alltrue([for p in module.pool : p.capacity_provider.auto_scaling_group_provider.managed_termination_protection == "DISABLED" && p.capacity_provider.auto_scaling_group_provider.managed_draining == "ENABLED" && p.capacity_provider.asg == { min_size = 0, max_size = 1, protect_from_scale_in = false }])
    error_message = "termination protection off, draining on, ASG 0..1 without scale-in protection"
  }

  # Load time: 168 GB at 1000 MiB/s is 161 s per pass; grace = 2 passes + 600 s allowance.
  assert {
    condition     = module.profile["deepseek-v4-flash"].health_check_grace_s == 922 && module.profile["nemotron-nano"].health_check_grace_s == 2 * 18 + 600
    error_message = "grace periods must be derived from weights and throughput: ${module.profile["deepseek-v4-flash"].health_check_grace_s}, ${module.profile["nemotron-nano"].health_check_grace_s}"
  }
  assert {
    condition     = local.registry.profiles["deepseek-v4-flash"].start == { capacity_timeout_s = 900, task_timeout_s = 900 + 161, health_timeout_s = 922 + 300, max_task_failures = 3 }
    error_message = "the registry's start deadlines must follow the derived load time: ${jsonencode(local.registry.profiles["deepseek-v4-flash"].start)}"
  }
  assert {
    condition     = local.registry.profiles["deepseek-v4-flash"].load == { weights_gb = 168, cache_throughput_mibps = 1000, cache_iops = 16000, weights_pass_s = 161, allowance_s = 600, health_check_grace_s = 922 }
    error_message = "the registry must publish the load estimate: ${jsonencode(local.registry.profiles["deepseek-v4-flash"].load)}"
  }
}

# The other branches: weights from the hub (no prefetch, no S3 access), termination protection on,
# the model cache on instance store, an explicit grace period and a public model (no token).
run "hub_weights_protected_instance_store" {
  command = plan

  variables {
    hub_token_secret_arn = null
    pools = {
      "g7e-2gpu" = {
        instance_type                  = "g7e.12xlarge"
        gpu_count                      = 2
        root_volume_gib                = 400
        managed_termination_protection = true
        model_cache_on_instance_store  = true
        cache_throughput_mibps         = 500
        cache_iops                     = 3000
      }
    }
    profiles = {
      "deepseek-v4-flash" = {
        pool              = "g7e-2gpu"
        image             = "vllm/vllm-openai:v0.26.0"
        model_id          = "nvidia/DeepSeek-V4-Flash-NVFP4"
        task_cpu          = 45056
        task_memory_mib   = 458752
        listener_priority = 20
        weights_source    = "hub"
        weights_gb        = 168
        model_load_s      = 1200
        vllm              = { tensor_parallel_size = 2 }
      }
    }
  }

  assert {
    condition     = [for c in module.profile["deepseek-v4-flash"].task_definition.containers : c.name] == ["vllm"]
    error_message = "with hub weights the task has no prefetch container"
  }
  assert {
    condition     = length(module.profile["deepseek-v4-flash"].pull_repositories) == 0
    error_message = "a Docker Hub image and the public ECR prefetch image need no ECR pull grant: ${jsonencode(module.profile["deepseek-v4-flash"].pull_repositories)}"
  }
  assert {
    condition     = module.profile["deepseek-v4-flash"].task_definition.containers[0].dependsOn == [] && module.profile["deepseek-v4-flash"].task_definition.containers[0].secrets == [] && !contains(module.profile["deepseek-v4-flash"].task_definition.containers[0].environment, { name = "HF_HUB_OFFLINE", value = "1" })
    error_message = "with hub weights vLLM depends on nothing, has no token without a secret, and may reach the hub"
  }
  assert {
    condition     = module.profile["deepseek-v4-flash"].health_check_grace_s == 1200
    error_message = "an explicit model_load_s is the grace period"
  }
  assert {
    # 168 GB at 500 MiB/s: ceil(320.4) = 321 s per pass.
    condition     = local.registry.profiles["deepseek-v4-flash"].start.task_timeout_s == 900 + 321 && local.registry.profiles["deepseek-v4-flash"].start.health_timeout_s == 1200 + 300
    error_message = "deadlines: ${jsonencode(local.registry.profiles["deepseek-v4-flash"].start)}"
  }
  assert {
    condition     = module.pool["g7e-2gpu"].capacity_provider.auto_scaling_group_provider.managed_termination_protection == "ENABLED" && module.pool["g7e-2gpu"].capacity_provider.asg.protect_from_scale_in == true
    error_message = "termination protection on: capacity provider ENABLED and the ASG protects new instances from scale-in"
  }
  assert {
    condition     = strcontains(module.pool["g7e-2gpu"].launch_template.user_data, "mount -o noatime \"$${disk}\" \"/var/lib/llm-model-cache\"")
    error_message = "the model cache must be mounted from the instance store when the pool asks"
  }
  assert {
    condition     = module.pool["g7e-2gpu"].launch_template.root_volume.throughput == 500 && module.pool["g7e-2gpu"].launch_template.root_volume.iops == 3000
    error_message = "the pool's gp3 throughput and IOPS reach the launch template"
  }
}

# An image in a private ECR repository: the execution role may pull from that repository alone.
run "private_ecr_image_is_the_only_pull_grant" {
  command = plan

  variables {
    profiles = {
      "deepseek-v4-flash" = {
        pool              = "g7e-2gpu"
        image             = "123456789012.dkr.ecr.us-east-1.amazonaws.com/team/vllm-openai:v0.26.0"
        model_id          = "nvidia/DeepSeek-V4-Flash-NVFP4"
        task_cpu          = 45056
        task_memory_mib   = 458752
        listener_priority = 20
        weights_source    = "hub"
        weights_gb        = 168
        vllm              = { tensor_parallel_size = 2 }
      }
    }
  }

  assert {
    condition     = jsonencode(module.profile["deepseek-v4-flash"].pull_repositories) == jsonencode(["arn:aws:ecr:us-east-1:123456789012:repository/team/vllm-openai"])
    error_message = "the pull grant must name the image's repository and nothing else: ${jsonencode(module.profile["deepseek-v4-flash"].pull_repositories)}"
  }
}

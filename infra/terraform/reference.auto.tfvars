# The reference deployment's two compute pools and serving profiles. Terraform loads *.auto.tfvars
# automatically: these are the defaults; edit here to add or change a pool or profile.

pools = {
  "g7e-1gpu" = {
    instance_type   = "g7e.2xlarge"
    gpu_count       = 1
    root_volume_gib = 200
    # Larger sizes of the same single 96 GiB GPU, tried in order when g7e.2xlarge has no capacity.
    alternate_instance_types = ["g7e.4xlarge", "g7e.8xlarge"]
  }
  "g7e-2gpu" = {
    instance_type   = "g7e.12xlarge"
    gpu_count       = 2
    root_volume_gib = 400
    # One Stopped instance while the pool rests: a start skips the EC2 launch and boot. Its
    # 400 GiB volume costs about 132 USD a month standing (README, warm capacity).
    warm_pool = {}
  }
}

profiles = {
  "nemotron-nano" = {
    pool              = "g7e-1gpu"
    image             = "vllm/vllm-openai:v0.26.0"
    vllm_version      = "0.26.0"
    model_id          = "nvidia/NVIDIA-Nemotron-Nano-9B-v2"
    task_cpu          = 7168
    task_memory_mib   = 57344
    listener_priority = 10
    # 9B parameters in bf16.
    weights_gb = 18
    vllm = {
      tensor_parallel_size = 1
      max_num_seqs         = 4
      max_model_len        = 16384
    }
  }
  "deepseek-v4-flash" = {
    pool              = "g7e-2gpu"
    image             = "vllm/vllm-openai:v0.26.0"
    vllm_version      = "0.26.0"
    model_id          = "nvidia/DeepSeek-V4-Flash-NVFP4"
    revision          = "48bfe38c62be14e8d82f9e3be12fe5d30a2e38c8"
    task_cpu          = 45056
    task_memory_mib   = 458752
    listener_priority = 20
    # The NVFP4 checkpoint at the pinned revision.
    weights_gb = 168
    vllm = {
      tensor_parallel_size    = 2
      max_num_seqs            = 4
      max_num_batched_tokens  = 4096
      max_model_len           = 16384
      gpu_memory_utilization  = 0.95
      kv_cache_dtype          = "fp8"
      tokenizer_mode          = "deepseek_v4"
      reasoning_parser        = "deepseek_v4"
      tool_call_parser        = "deepseek_v4"
      enable_auto_tool_choice = true
      trust_remote_code       = true
      speculative_method      = "mtp"
      speculative_tokens      = 1
    }
  }
}

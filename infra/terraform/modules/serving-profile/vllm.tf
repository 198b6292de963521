# The vLLM command line, derived from the typed options so that nothing is kept in step by hand.
# Tests evaluate these expressions (tests/unit/terraform): keep them plain and formula-driven.

locals {
  # Every decode step of a full batch under MTP verifies max_num_seqs x (1 + k) tokens: the largest
  # CUDA graph must cover it, or the step falls back to eager mode (the reference lost 80 % of
  # its throughput when size 8 was missing at 4 sequences with MTP=1).
  capture_max = var.vllm.max_num_seqs * (1 + var.vllm.speculative_tokens)
  # Powers of two below the maximum, then the maximum itself: smaller batches pad up to the next size.
  cudagraph_capture_sizes = concat([for i in range(0, 15) : pow(2, i) if pow(2, i) < local.capture_max], [local.capture_max])

  compilation_config = {
    mode                    = 0
    cudagraph_mode          = var.vllm.cudagraph_mode
    cudagraph_capture_sizes = local.cudagraph_capture_sizes
  }
  speculative_config = {
    method                 = var.vllm.speculative_method
    num_speculative_tokens = var.vllm.speculative_tokens
  }

  # Valued flags: a null value leaves the flag out.
  value_flags = {
    "--revision"               = var.revision
    "--tensor-parallel-size"   = var.vllm.tensor_parallel_size
    "--max-num-seqs"           = var.vllm.max_num_seqs
    "--max-num-batched-tokens" = var.vllm.max_num_batched_tokens
    "--max-model-len"          = var.vllm.max_model_len
    "--gpu-memory-utilization" = var.vllm.gpu_memory_utilization
    "--kv-cache-dtype"         = var.vllm.kv_cache_dtype
    "--tokenizer-mode"         = var.vllm.tokenizer_mode
    "--reasoning-parser"       = var.vllm.reasoning_parser
    "--tool-call-parser"       = var.vllm.tool_call_parser
  }
  # Switches: present when true.
  switch_flags = {
    "--enable-auto-tool-choice" = var.vllm.enable_auto_tool_choice
    "--trust-remote-code"       = var.vllm.trust_remote_code
  }

  # Streamed weights: the model is the revision's snapshot directory in the weights bucket (the
  # Hugging Face cache tree the prefetch would sync), read by the Run:ai model streamer.
  streamed_model = "s3://${coalesce(var.weights_bucket, "unset")}/${trim(var.weights_prefix, "/")}/models--${replace(var.model_id, "/", "--")}/snapshots/${coalesce(var.revision, "unpinned")}"
  vllm_args = concat(
    ["--model", var.load_format == "runai_streamer" ? local.streamed_model : var.model_id, "--served-model-name", var.served_model_name, "--host", "0.0.0.0", "--port", tostring(var.container_port)],
    var.load_format == "runai_streamer" ? ["--load-format", "runai_streamer"] : [],
    # The snapshot is the revision: --revision would make vLLM look for it again.
    flatten([for flag, value in local.value_flags : value == null || (flag == "--revision" && var.load_format == "runai_streamer") ? [] : [flag, tostring(value)]]),
    [for flag, on in local.switch_flags : flag if on],
    ["--compilation-config", jsonencode(local.compilation_config)],
    var.vllm.speculative_tokens > 0 ? ["--speculative-config", jsonencode(local.speculative_config)] : [],
    var.vllm.extra_args,
  )

  # The registry's `serving` block: what is deployed, for the controller and benchmark records.
  serving = {
    image                   = var.image
    vllm_version            = var.vllm_version
    model_id                = var.model_id
    revision                = var.revision
    tensor_parallel_size    = var.vllm.tensor_parallel_size
    max_num_seqs            = var.vllm.max_num_seqs
    max_num_batched_tokens  = var.vllm.max_num_batched_tokens
    max_model_len           = var.vllm.max_model_len
    kv_cache_dtype          = var.vllm.kv_cache_dtype
    speculative_tokens      = var.vllm.speculative_tokens
    cudagraph_capture_sizes = local.cudagraph_capture_sizes
    load_format             = var.load_format
    args                    = local.vllm_args
  }
}

# CUDA-graph capture sizes derived in modules/serving-profile/vllm.tf, for MTP 0..3 and a spread of
# max_num_seqs, all in one plan: every decode batch (up to max_num_seqs x (1 + MTP) tokens) must
# find a captured size at most twice its own, the largest must be exactly that maximum (the
# reference lost 80 % of its throughput when size 8 was missing at 4 sequences with MTP=1), and the
# same sizes must reach vLLM's command line.

mock_provider "aws" {
  source          = "./tests/mocks"
  override_during = plan
}

variables {
  pools = { p = { instance_type = "g7e.12xlarge", gpu_count = 2 } }
  profiles = {
    for c in setproduct([0, 1, 2, 3], [1, 3, 4, 5, 12, 256]) : "s${c[1]}-mtp${c[0]}" => {
      pool              = "p"
      image             = "vllm/vllm-openai:v0.26.0"
      model_id          = "org/model"
      task_cpu          = 1024
      task_memory_mib   = 4096
      listener_priority = 1000 * c[0] + c[1]
      weights_gb        = 10
      vllm              = { max_num_seqs = c[1], speculative_tokens = c[0] }
    }
  }
}

run "capture_sizes" {
  command = plan

  assert {
    condition     = length(local.registry.profiles) == 24
    error_message = "expected 24 profiles (MTP 0..3 x 6 sequence counts)"
  }
  assert {
    condition = alltrue([for name, p in local.registry.profiles :
      max(p.serving.cudagraph_capture_sizes...) == p.serving.max_num_seqs * (1 + p.serving.speculative_tokens)
    ])
    error_message = "the largest capture size must be max_num_seqs x (1 + speculative_tokens): ${jsonencode({ for n, p in local.registry.profiles : n => p.serving.cudagraph_capture_sizes })}"
  }
  assert {
    condition = alltrue([for name, p in local.registry.profiles :
      alltrue([for i in range(1, length(p.serving.cudagraph_capture_sizes)) : p.serving.cudagraph_capture_sizes[i] > p.serving.cudagraph_capture_sizes[i - 1]])
    ])
    error_message = "capture sizes must be strictly ascending"
  }
  assert {
    condition = alltrue(flatten([for name, p in local.registry.profiles : [
      for n in range(1, p.serving.max_num_seqs * (1 + p.serving.speculative_tokens) + 1) :
      min([for s in p.serving.cudagraph_capture_sizes : s if s >= n]...) <= 2 * n
    ]]))
    error_message = "some decode batch pads to more than twice its size"
  }
  assert {
    condition     = local.registry.profiles["s4-mtp1"].serving.cudagraph_capture_sizes == [1, 2, 4, 8]
    error_message = "4 sequences with MTP=1 need [1, 2, 4, 8]"
  }
  assert {
    condition = alltrue([for name, p in local.registry.profiles :
      jsondecode(p.serving.args[index(p.serving.args, "--compilation-config") + 1]).cudagraph_capture_sizes == p.serving.cudagraph_capture_sizes
    ])
    error_message = "the command line's --compilation-config must carry the published sizes"
  }
  assert {
    condition = alltrue([for name, p in local.registry.profiles :
      p.serving.speculative_tokens == 0 ? !contains(p.serving.args, "--speculative-config") : jsondecode(p.serving.args[index(p.serving.args, "--speculative-config") + 1]) == { method = "mtp", num_speculative_tokens = p.serving.speculative_tokens }
    ])
    error_message = "--speculative-config must be present exactly when MTP is on, with its token count"
  }
}

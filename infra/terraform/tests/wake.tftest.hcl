# Wake on request: a profile with wake_on_request gets a rule that starts at the waker's Lambda target
# group (Terraform then ignores where it forwards: the controller moves it), the waker's group,
# ELB's permission to invoke the function and the attachment, and the registry entry the controller
# reads (wake_on_request and the rule and group it points). Off, nothing of the waker is made and the
# rule forwards to the model as before. A wake-on-request profile without the waker is refused.

mock_provider "aws" {
  source          = "./tests/mocks"
  override_during = plan
}

override_resource {
  target          = aws_lb_target_group.waker
  override_during = plan
  values          = { arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/self-hosted-llm-poc-waker/0123456789abcdef" }
}

variables {
  waker_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:servingctl-WakerFunction-abc123"
  pools              = { small = { instance_type = "g7e.2xlarge", gpu_count = 1 } }
  profiles = {
    sleepy = {
      pool                    = "small"
      image                   = "vllm/vllm-openai:v0.26.0"
      model_id                = "org/sleepy"
      task_cpu                = 7168
      task_memory_mib         = 57344
      listener_priority       = 1
      weights_gb              = 16
      vllm                    = {}
      wake_on_request         = true
      wake_monthly_budget_usd = 250
    }
    awake = {
      pool              = "small"
      image             = "vllm/vllm-openai:v0.26.0"
      model_id          = "org/awake"
      task_cpu          = 7168
      task_memory_mib   = 57344
      listener_priority = 2
      weights_gb        = 16
      vllm              = {}
    }
  }
}

run "wake_on" {
  command = plan

  assert {
    condition     = aws_lb_target_group.waker[0].target_type == "lambda"
    error_message = "the waker's target group must be a Lambda target group"
  }
  assert {
    condition     = aws_lambda_permission.waker[0].principal == "elasticloadbalancing.amazonaws.com" && aws_lambda_permission.waker[0].action == "lambda:InvokeFunction" && aws_lambda_permission.waker[0].source_arn == aws_lb_target_group.waker[0].arn && aws_lambda_permission.waker[0].function_name == var.waker_function_arn
    error_message = "ELB may invoke the waker for its target group only"
  }
  assert {
    condition     = aws_lb_target_group_attachment.waker[0].target_id == var.waker_function_arn && aws_lb_target_group_attachment.waker[0].target_group_arn == aws_lb_target_group.waker[0].arn
    error_message = "the waker's target group must target the waker function"
  }
  assert {
    condition     = module.profile["sleepy"].rule_forwards_to == aws_lb_target_group.waker[0].arn
    error_message = "a wake-on-request profile's rule starts at the waker (the profile rests at 0)"
  }
  assert {
    condition     = module.profile["awake"].rule_forwards_to == module.profile["awake"].target_group_arn
    error_message = "a profile without wake_on_request forwards to its model's target group"
  }
  assert {
    condition     = jsondecode(nonsensitive(aws_ssm_parameter.registry_profile["sleepy"].value)).wake_on_request == true && jsondecode(nonsensitive(aws_ssm_parameter.registry_profile["sleepy"].value)).wake.waker_target_group_arn == aws_lb_target_group.waker[0].arn && jsondecode(nonsensitive(aws_ssm_parameter.registry_profile["sleepy"].value)).wake.monthly_budget_usd == 250
    error_message = "the registry entry must carry wake_on_request, the waker's group and the budget"
  }
  assert {
    condition     = jsondecode(nonsensitive(aws_ssm_parameter.registry_profile["awake"].value)).wake_on_request == false
    error_message = "a profile without wake_on_request is published with it false"
  }
  assert {
    condition     = length(output.listener_rule_arns) == 2
    error_message = "every profile's rule is in listener_rule_arns (the controller's ModifyRule scoping)"
  }
}

run "wake_off" {
  command = plan
  variables {
    waker_function_arn = null
    profiles = {
      awake = {
        pool              = "small"
        image             = "vllm/vllm-openai:v0.26.0"
        model_id          = "org/awake"
        task_cpu          = 7168
        task_memory_mib   = 57344
        listener_priority = 2
        weights_gb        = 16
        vllm              = {}
      }
    }
  }

  assert {
    condition     = length(aws_lb_target_group.waker) == 0 && length(aws_lambda_permission.waker) == 0 && length(aws_lb_target_group_attachment.waker) == 0
    error_message = "without the waker nothing of it is made"
  }
  assert {
    condition     = module.profile["awake"].rule_forwards_to == module.profile["awake"].target_group_arn
    error_message = "the rule forwards to the model's target group"
  }
  assert {
    condition     = jsondecode(nonsensitive(aws_ssm_parameter.registry_profile["awake"].value)).wake == null && jsondecode(nonsensitive(aws_ssm_parameter.registry_profile["awake"].value)).wake_on_request == false
    error_message = "no wake routing is published without the waker"
  }
}

run "wake_on_without_the_waker" {
  command = plan
  variables {
    waker_function_arn = null
  }
  expect_failures = [var.profiles]
}

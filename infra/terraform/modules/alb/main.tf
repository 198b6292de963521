# Internal ALB: HTTP :80 inside the VPC only, default 404, profiles attach header rules to the
# listener. Admits the controller's in-VPC Lambda security group and the configured client CIDRs.

resource "aws_security_group" "lambda" {
  #checkov:skip=CKV2_AWS_5:Attached to the controller's in-VPC Lambdas by the SAM stack (output lambda_security_group_id).
  name        = "${var.name}-vpc-lambda"
  description = "In-VPC Lambdas of the controller (smoke test, benchmark worker)"
  vpc_id      = var.vpc_id
  tags        = { Name = "${var.name}-vpc-lambda" }
}

resource "aws_vpc_security_group_egress_rule" "lambda_to_alb" {
  security_group_id            = aws_security_group.lambda.id
  description                  = "Model requests to the internal ALB"
  ip_protocol                  = "tcp"
  from_port                    = 80
  to_port                      = 80
  referenced_security_group_id = aws_security_group.alb.id
}

resource "aws_vpc_security_group_egress_rule" "lambda_https" {
  security_group_id = aws_security_group.lambda.id
  description       = "AWS APIs (DynamoDB, S3, SSM) over HTTPS through NAT or endpoints"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_security_group" "alb" {
  name        = "${var.name}-alb"
  description = "Internal ALB: port 80 from the controller Lambdas and client CIDRs inside the VPC"
  vpc_id      = var.vpc_id
  tags        = { Name = "${var.name}-alb" }
}

resource "aws_vpc_security_group_ingress_rule" "alb_from_lambda" {
  #checkov:skip=CKV_AWS_260:The source is the Lambda security group, not 0.0.0.0/0.
  security_group_id            = aws_security_group.alb.id
  description                  = "Controller Lambdas in the VPC"
  ip_protocol                  = "tcp"
  from_port                    = 80
  to_port                      = 80
  referenced_security_group_id = aws_security_group.lambda.id
}

resource "aws_vpc_security_group_ingress_rule" "alb_from_clients" {
  for_each = toset(var.client_cidrs)

  security_group_id = aws_security_group.alb.id
  description       = "Client CIDR inside the VPC"
  ip_protocol       = "tcp"
  from_port         = 80
  to_port           = 80
  cidr_ipv4         = each.value
}

# Targets are awsvpc task ENIs in the private subnets; the cluster's task group admits only the ALB.
resource "aws_vpc_security_group_egress_rule" "alb_to_targets" {
  security_group_id = aws_security_group.alb.id
  description       = "Model servers (target port) inside the VPC"
  ip_protocol       = "tcp"
  from_port         = var.target_port
  to_port           = var.target_port
  cidr_ipv4         = var.vpc_cidr
}

resource "aws_lb" "this" {
  #checkov:skip=CKV_AWS_91:Access logs are an option (var.access_logs, off by default: their bucket bills storage); per-request records come from the benchmark plane.
  #checkov:skip=CKV_AWS_150:The data plane is torn down and rebuilt by terraform destroy; the ALB holds no state.
  #checkov:skip=CKV2_AWS_28:Internal ALB reachable only from inside the VPC; WAF protects internet-facing entry points.
  #checkov:skip=CKV2_AWS_20:No HTTPS listener to redirect to on the internal ALB (see the listener's CKV_AWS_2).
  #checkov:skip=CKV2_AWS_76:Internal ALB reachable only from inside the VPC; no WAF (see CKV2_AWS_28).
  name                       = var.name
  internal                   = true
  load_balancer_type         = "application"
  security_groups            = [aws_security_group.alb.id]
  subnets                    = var.subnet_ids
  idle_timeout               = var.idle_timeout_s
  drop_invalid_header_fields = true

  dynamic "access_logs" {
    for_each = var.access_logs ? [aws_s3_bucket.access_logs[0].id] : []
    content {
      bucket  = access_logs.value
      enabled = true
    }
  }
  # AWS checks it may write to the bucket when logging is turned on.
  depends_on = [aws_s3_bucket_policy.access_logs]
}

resource "aws_lb_listener" "http" {
  #checkov:skip=CKV_AWS_2:Internal listener inside the VPC without a certificate; traffic never leaves the VPC.
  #checkov:skip=CKV_AWS_103:No TLS on the internal listener (see CKV_AWS_2).
  #checkov:skip=CKV2_AWS_20:No HTTPS listener to redirect to on the internal ALB (see CKV_AWS_2).
  load_balancer_arn = aws_lb.this.arn
  port              = 80
  protocol          = "HTTP"

  # Requests without a known X-LLM-Profile header get a clear 404 instead of a random model.
  default_action {
    type = "fixed-response"

    fixed_response {
      content_type = "application/json"
      message_body = "{\"error\":\"unknown or missing X-LLM-Profile header\"}"
      status_code  = "404"
    }
  }
}

output "arn" {
  description = "ALB ARN."
  value       = aws_lb.this.arn
}

output "arn_suffix" {
  description = "ALB ARN suffix (CloudWatch LoadBalancer dimension)."
  value       = aws_lb.this.arn_suffix
}

output "dns_name" {
  description = "Internal DNS name of the ALB."
  value       = aws_lb.this.dns_name
}

output "endpoint_url" {
  description = "Base URL of the ALB."
  value       = "http://${aws_lb.this.dns_name}"
}

output "listener_arn" {
  description = "HTTP :80 listener that profiles attach their header rules to."
  value       = aws_lb_listener.http.arn
}

output "security_group_id" {
  description = "Security group of the ALB (task security groups admit it)."
  value       = aws_security_group.alb.id
}

output "lambda_security_group_id" {
  description = "Security group for the in-VPC Lambdas, admitted by the ALB."
  value       = aws_security_group.lambda.id
}

output "access_logs_bucket" {
  description = "S3 bucket of the ALB's access logs (null when they are off); objects under AWSLogs/<account>/elasticloadbalancing/."
  value       = one(aws_s3_bucket.access_logs[*].id)
}

"""S3 as the twin plays it: moto's buckets, read by the IAM conditions (patches)."""

"""DynamoDB as the twin plays it: moto's tables with atomic item writes (patches)."""

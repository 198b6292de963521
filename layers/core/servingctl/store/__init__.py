"""State, locks, ledger and benchmark storage behind small interfaces (DynamoDB/S3 and in-memory)."""

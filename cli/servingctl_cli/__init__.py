"""The `servingctl` command: one module per command group, each exposing register(subparsers)."""

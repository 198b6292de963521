"""The benchmark engine: backend (HTTP/SSE), scheduler (load modes), metrics, outputs."""

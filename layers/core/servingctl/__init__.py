"""servingctl: serverless controller for self-hosted LLM serving on AWS GPU instances."""

__version__ = "0.1.0"

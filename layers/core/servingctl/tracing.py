"""What the handlers' X-Ray tracer instruments: the AWS SDK only."""

from __future__ import annotations

# Powertools' Tracer() without patch_modules patches every library aws-xray-sdk supports, httpx
# included: every streamed benchmark request would get a subsegment (nested wrongly across the
# concurrent asyncio tasks, and CPU taken from the client being measured). boto3 calls go through
# botocore, so patching botocore traces every AWS call and nothing else.
PATCH_MODULES = ("botocore",)

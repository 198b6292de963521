# REST API: regenerate the committed OpenAPI document from the routes (a unit test fails when stale).
.PHONY: openapi

openapi: setup ## regenerate layers/core/servingctl/api/openapi.json from the routes
	$(VENV)/bin/python -m servingctl.api.routes

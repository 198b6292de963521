"""The REST API: Powertools resolver routes and the OpenAPI document generated from them."""

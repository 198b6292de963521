"""API Gateway as the twin plays it: the REST API over HTTP in front of the api function (apigw)."""

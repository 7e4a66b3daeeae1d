"""The job API's contract: the typed bodies every client reads and sends, and the OpenAPI document made from them.

``view``: the job view (``GET /api/jobs/{id}``); ``events``: the job event stream's events; ``bodies``: the other
request and response bodies; ``openapi``:
the document of the whole HTTP API, generated from these models (docs/openapi.json is its checked-in copy).
"""

"""The Durable Functions extension: the engine, its SQLite store, the Durable HTTP API, the gRPC sidecar, replay."""

"""The Durable Task gRPC sidecar protocol on devhost's engine: ``durabletask`` workers and clients run against it."""

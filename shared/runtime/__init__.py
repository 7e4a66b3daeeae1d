"""Runtime plumbing: settings, the client factory, telemetry, pricing, prompts and side stores."""

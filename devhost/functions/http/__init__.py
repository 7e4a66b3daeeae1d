"""The HTTP side of the host: the server, route matching, the Durable HTTP API, keys and Easy Auth."""

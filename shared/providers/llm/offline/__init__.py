"""The embedded offline model: deterministic planning, SQL writing and answer writing, no network."""

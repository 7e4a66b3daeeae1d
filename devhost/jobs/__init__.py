"""The job-specific command line (`python -m devhost ask`, `python -m devhost jobs ...`): HTTP clients of the
app's job API. The generic host never imports this package; only the CLI entry point loads it, lazily."""

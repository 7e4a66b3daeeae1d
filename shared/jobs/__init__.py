"""The job domain: the executor contract, plans, job models, the execution context and token counting."""

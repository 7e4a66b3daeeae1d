"""LLM providers: the OpenAI-compatible client and the embedded offline model."""

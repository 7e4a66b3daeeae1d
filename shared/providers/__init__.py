"""Providers behind the executors: LLMs, document search and SQL, each offline and on Azure."""

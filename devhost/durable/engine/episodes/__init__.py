"""Episodes of orchestrations the app runs: the replay through the SDK, the actions it decides, their messages.

- ``replay``: ``Episodes``, one replay of the orchestrator over its history, and applying what it decided.
- ``actions``: ``ActionHandlers``, replayed actions checked, new ones scheduled (one handler per action type)
  and persisted once the episode commits.
- ``messages``: which pending messages one episode delivers, and consuming them.
- ``retries``: calls with a retry policy, as DTFx retries them.
"""

"""The core of a run: collaborators that execute steps under the policy, each owning one concern.

``record`` (the run's state and how it is shown), ``budgets`` (budgets and run limits), ``questions`` (waits
for a person), ``attempts`` (one call under the policy: attempts, back-off, fallback across models),
``approvals`` (SQL approval), ``code`` (run_python under its policy), ``steps`` (one step of any kind),
``supervision`` (hybrid mode's Supervisor) and ``core`` (the bundle the producers of steps are given).
The producers (orchestrators/plan.py, agent.py, workflow.py, fork.py) call these; nothing here imports them.
"""

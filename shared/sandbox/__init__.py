"""Run untrusted Python behind an isolation boundary: the models (base.py) and the backends (local.py)."""

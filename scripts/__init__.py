"""Developer tools run as modules (``python -m scripts.<name>``); never imported by the app."""

"""Web console tests: the static route over HTTP and the UI in headless Chromium."""

"""The Functions host: loading a Python v2 app, invoking its functions (HTTP, timer, queue and blob triggers), logs."""

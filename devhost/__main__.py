"""``python -m devhost``: see devhost.cli."""

import atexit
import logging
import os
import sys

from devhost.cli import main

if __name__ == "__main__":
    code = main()
    # Everything is persisted and closed at this point. Run the exit handlers (telemetry flushes and the
    # like), then skip interpreter teardown of the large Azure SDK import graph (~1 s on a small VM),
    # which matters when tests start and stop many hosts.
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

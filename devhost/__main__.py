"""``python -m devhost``: see devhost.cli."""

import sys

from devhost.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""`python -m infra.procfile start`: honcho, with time for a clean stop.

honcho SIGKILLs what has not stopped 5 s after Ctrl-C (a module constant, no option). The
supervisor needs longer: it stops each job between batches, commits the store's last writes,
then stops the broker. This runs honcho's own command line with a wait that covers that.
"""
from __future__ import annotations

import sys

from honcho import command, manager

from infra.config import load

manager.KILL_WAIT = load().stop_grace_seconds + 30

if __name__ == "__main__":
    sys.argv[0] = "honcho"
    sys.exit(command.main())

"""The frozen app's entry point: the same `hearth` command as the console script.

With no arguments it opens the app; the app starts this same executable as its worker
(``<exe> serve ...``, see engine.worker.supervisor.hearth_command).
"""

import multiprocessing
import sys

from engine.cli import main

if __name__ == "__main__":
    multiprocessing.freeze_support()  # a no-op unless a library starts processes with multiprocessing
    sys.exit(main())

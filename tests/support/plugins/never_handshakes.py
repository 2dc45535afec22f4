"""A 'plugin' that writes its PID and then never prints a handshake."""

import sys
import time
from pathlib import Path

if len(sys.argv) > 1:
    Path(sys.argv[1]).write_text(str(__import__("os").getpid()))
time.sleep(600)

"""What a job's child and its dispatcher agree on beyond the JSON lines (app/bench/child.py writes
the protocol down): the keep-alive's deadline, set in the child's environment, and the exit codes
of a child that stopped itself for its parent's sake."""

KEEPALIVE_VAR = "TALLY_KEEPALIVE_S"
"""Seconds a child waits for a keep-alive (a newline on stdin) before it takes its parent for
stalled; unset: it waits for the end of its stdin alone."""
PARENT_DIED_EXIT = 3
"""Its stdin ended: the dispatcher died."""
PARENT_STALLED_EXIT = 4
"""No keep-alive within KEEPALIVE_VAR seconds: the dispatcher is paused or stalled."""

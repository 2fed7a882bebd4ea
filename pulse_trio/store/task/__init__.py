"""Chart ``task``: a task from submit to its terminal state, and the purge of ended tasks.

``tasks`` (submit, promote, manual retry), ``steps`` (the task's moves that run
inside lease, cancellation and key-permit transactions) and ``retention``
(trigger ``purge``).
"""

"""The read side: views that change nothing and belong to no one transition.

``task`` (one task, as ``pulse-trio task show`` prints it), ``queries`` (the
producer's listings, queue depths, workers and nodes), ``dashboard`` (the
overview's bounded figures) and ``timer_probe`` (which shared timers have
work, in one statement).
"""

"""``serve --processes N``: one listening address, N serve processes, each a node of its own.

The parent (:mod:`~pulse_trio.group.parent`) binds the worker and HTTP
addresses once, starts N ``serve`` children that inherit the bound sockets,
and forwards signals. Each child (:mod:`~pulse_trio.group.member`) is a full
instance with its own node, store pool and event loop, so N processes use N
cores where one process is held to one by its GIL. Worker connections are
balanced across the children (:mod:`~pulse_trio.group.shares`); the HTTP
API's connections go to whichever child accepts first, new work (a submit
there, or work a child's timers or schedules made READY) wakes every
child's dispatcher (:mod:`~pulse_trio.group.wake`), and
``/metrics`` answers for the whole group (:mod:`~pulse_trio.group.metrics_files`), and
under systemd's watchdog the parent says the group is alive only while every
member's loop beats (:mod:`~pulse_trio.group.heartbeats`). Both the shares and
the heartbeats are slots of memory every process maps (:mod:`~pulse_trio.group.slots`).
"""

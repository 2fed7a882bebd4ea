"""Chart ``lease``: an offer to one session, its start, renewals, finish and end.

``assign`` (the claim that offers READY tasks), ``leases`` (the worker's
``task.start``, ``task.renew``, ``task.finish``), ``resume``, ``timers``
(``lapse`` and ``expire``), ``steps`` (what a cancel request runs on a live
lease), ``guards``, and ``known`` (what this process remembers of the leases
it offered: the lean path's expectations).
"""

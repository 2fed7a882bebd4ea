"""Charts ``queue``, ``fair_share`` and ``fairness_weight``: a queue's pause and retention (``queues``), fairness (``fairness``)."""

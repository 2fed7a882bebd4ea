"""pulse-trio: durable task dispatch over pulse.worker.v1 leases, MySQL as the only state."""

__version__ = "0.1.0"

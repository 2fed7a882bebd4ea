"""`pulse-trio bench`: throughput and latency of the whole platform, measured."""

"""The galera group: one real 3-node MariaDB Galera cluster for the whole group.

Started on loopback by ``galera_cluster.py`` (Debian's ``galera-4`` and
``rsync``, installed by ``scripts/bootstrap``); every test gets a fresh
database on it and leaves all three nodes Synced for the next one. The
chaos helpers (fleet, recording worker, checks) are reused from
``tests/chaos``.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest


from galera_cluster import GaleraCluster


@pytest.fixture(scope="session")
def galera() -> Iterator[GaleraCluster]:
    cluster = GaleraCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster(galera: GaleraCluster) -> Iterator[GaleraCluster]:
    """The cluster with all three nodes running and Synced, before and after the test."""
    _heal(galera)
    yield galera
    _heal(galera)


def _heal(cluster: GaleraCluster) -> None:
    for node in cluster.nodes:
        if node.process is None or node.process.poll() is not None:
            node.restart_after_crash()
        else:
            try:
                node.isolate(False)
            except Exception:  # noqa: BLE001 - a node that does not answer is restarted below
                node.kill()
                node.restart_after_crash()
    for node in cluster.nodes:
        node.wait_synced(60, cluster_size=len(cluster.nodes))


@pytest.fixture
def database_name() -> str:
    return f"pulse_galera_{secrets.token_hex(4)}"

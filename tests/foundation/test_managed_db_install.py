"""Managed databases initialised at once do not clash: each bootstrap keeps its temporary files to itself.

``mariadb-install-db`` runs a bootstrap server whose temporary tables go to
TMPDIR; several of them in one shared /tmp failed now and then ("Unknown
table 'mysql.tmp_user_sys'"), which is what a test run on two workers, or
two services started together on a fresh machine, does.
"""

from __future__ import annotations

import concurrent.futures

import pytest

from pulse_trio.managed_db import ManagedMariaDB

pytestmark = pytest.mark.live  # it runs mariadb-install-db processes


def test_four_installs_at_once_all_succeed_each_with_its_own_temporary_directory(tmp_path):
    for round_ in range(2):
        servers = [ManagedMariaDB(tmp_path / f"r{round_}-{i}") for i in range(4)]
        with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
            for future in [pool.submit(server._install) for server in servers]:
                future.result()  # raises ManagedDatabaseError if one bootstrap failed
        for server in servers:
            assert (server.data_dir / "mysql").is_dir()
            assert server.tmp_dir.is_dir() and server.tmp_dir.parent == server.state_dir

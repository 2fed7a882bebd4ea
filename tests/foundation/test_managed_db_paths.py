"""Where a managed MariaDB lives: a state dir it could not put its socket in is refused before anything starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pulse_trio.managed_db import ManagedDatabaseError, ManagedMariaDB


def test_a_state_dir_whose_socket_path_is_too_long_in_bytes_is_refused():
    """The kernel counts a socket path in bytes: a state dir of few but wide characters is refused at once."""
    wide = Path("/tmp") / ("é" * 48)  # short in characters, not in bytes (nothing is created)
    assert len(str(wide / "mysqld.sock")) <= 100 < len(os.fsencode(wide / "mysqld.sock"))
    with pytest.raises(ManagedDatabaseError, match="too long for a unix socket"):
        ManagedMariaDB(wide)

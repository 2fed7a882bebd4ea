"""Fixtures for the producer client tests (the database comes from tests/conftest.py)."""

from __future__ import annotations

import pytest

from pulse_trio.client import Client


@pytest.fixture
def client(db):
    with Client(db) as c:
        yield c

"""Shared fixtures for the tests in tests/ (their helpers are in ``support/``: this
directory is on the import path through this file)."""

from __future__ import annotations

import numpy as np
import pytest

from support.s3 import rgw_server, s3  # noqa: F401  (S3 servers, moto and radosgw, for every test that asks)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261121)

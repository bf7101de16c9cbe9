"""The Rust tokenizer of the n-gram overlap job is checked against
tests/fixtures/python_text.json; this test checks that file is what Python says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_the_committed_fixture_is_this_pythons_output():
    if sys.version_info[:2] != (3, 11):
        import pytest
        pytest.skip("the reference is Python 3.11 (Unicode 14.0)")
    fresh = subprocess.run([sys.executable, str(FIXTURES / "make_python_text.py")],
                           capture_output=True, text=True, check=True).stdout
    assert fresh == (FIXTURES / "python_text.json").read_text()

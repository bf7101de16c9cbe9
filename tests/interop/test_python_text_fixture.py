"""The Rust tokenizer of the n-gram overlap job takes every character property from
jobs/ngram_overlap/src/python_unicode.rs and is checked against
tests/fixtures/python_text.json; this test checks both files are what this Python says
(the generator reads str.lower(), re's \\s and the final-sigma rule off Python itself)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TABLES = ROOT / "jobs" / "ngram_overlap" / "src" / "python_unicode.rs"


def generate(*args: str) -> str:
    return subprocess.run([sys.executable, str(FIXTURES / "make_python_text.py"), *args],
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture(autouse=True)
def reference_python():
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the reference is Python 3.11 (Unicode 14.0)")


def test_the_committed_fixture_is_this_pythons_output():
    assert generate() == (FIXTURES / "python_text.json").read_text()


def test_the_tokenizers_tables_are_this_pythons_output():
    assert generate("--rust") == TABLES.read_text()

"""Helpers shared by the tests under tests/ (imported as ``support.<module>``;
``tests/`` is on the import path through its conftest)."""

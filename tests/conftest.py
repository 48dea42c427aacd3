"""Longest first: the learning tests (2-4 minutes each, one subprocess each) are collected before the quick files, so
that with `-n 2 --dist loadfile` (pyproject.toml) the quick files fill the gaps on the other worker instead of one
learning test running alone at the end of the suite."""


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: not item.nodeid.startswith("tests/test_learning"))  # stable: otherwise as collected

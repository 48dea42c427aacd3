"""Longest first: the learning tests (2-4 minutes each, one subprocess each) are collected before the quick files, so
that with `-n 2 --dist loadfile` (pyproject.toml) the quick files fill the gaps on the other worker instead of one
learning test running alone at the end of the suite. The header names the forks under test (tests/helpers.py)."""

import os


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: not item.nodeid.startswith("tests/test_learning"))  # stable: otherwise as collected


def pytest_report_header(config):
    """One line for each script whose tests an environment variable points at a fork: which file they test."""
    from tests.helpers import SCRIPTS, fork_variable, script_path

    lines = []
    for name, original in SCRIPTS.items():
        if os.environ.get(fork_variable(name)):
            try:
                lines.append(f"{fork_variable(name)}: testing {script_path(name)} in place of {original}")
            except FileNotFoundError as error:
                lines.append(str(error))
    return lines

"""Fixtures the benchmark tests share with the link tests: the linked sample job."""

from tests.link.conftest import linked_sample  # noqa: F401

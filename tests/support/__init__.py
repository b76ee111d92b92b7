"""Helpers the tests share (no test module imports another; tests/architecture/test_tests_layout.py
checks it). Fixtures stay in the conftest.py files, pytest's way of sharing them."""

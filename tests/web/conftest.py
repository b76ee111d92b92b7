import pytest

from .common import start_web_hub


@pytest.fixture(scope="module")
def hub(sim, tmp_path_factory):
    """One hub with the service and its pages per test module."""
    child = start_web_hub(tmp_path_factory.mktemp("hub"), sim)
    yield child
    child.stop(grace=60)

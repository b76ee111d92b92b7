"""The service tests' fixtures: one cluster for the package (each module starts its own hub
and stops its servers, so their pods go; test_shared_gpus_live.py has a cluster of its own),
and a webhook receiver per module."""

import pytest

from ..conftest import sim_fixture
from .common import Webhook

sim = sim_fixture("package")


@pytest.fixture(scope="module")
def webhook():
    """Receives the service's webhook notices, for one module's hub."""
    hook = Webhook()
    yield hook
    hook.close()

import pytest

from ..support.harness import Harness
from ..support.service_hub import Webhook


@pytest.fixture
def harness(tmp_path):
    """Makes Harnesses (the cycle with in-process fakes) on `tmp_path`; their stores closed after."""
    made = []

    def make(**kw) -> Harness:
        h = Harness(tmp_path, **kw)
        made.append(h)
        return h

    yield make
    for h in made:
        h.store.close()


@pytest.fixture(scope="module")
def webhook():
    """Receives the service's webhook notices, for one module's hub."""
    hook = Webhook()
    yield hook
    hook.close()

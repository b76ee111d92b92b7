import pytest

from ..support.service_hub import Webhook


@pytest.fixture(scope="module")
def webhook():
    """Receives the service's webhook notices, for one module's hub."""
    hook = Webhook()
    yield hook
    hook.close()

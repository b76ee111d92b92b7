import pytest

from ..support.hostile_world import Hostile


@pytest.fixture
async def make(tmp_path):
    """Makes Hostile worlds (tests/support/hostile_world.py) on `tmp_path`; closed after."""
    made = []

    async def make(**kwargs) -> Hostile:
        made.append(await Hostile(tmp_path, **kwargs).start())
        return made[-1]

    yield make
    for w in made:
        await w.close()

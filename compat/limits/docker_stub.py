"""A stand-in for lovely-pytest-docker's `docker_services` fixture.

limits' conftest.py starts each backing service through
`docker_services.start(name)` (a container per service, Redis on port
7379). compat/limits/run.sh starts the server on 7379 itself, so starting
and waiting do nothing here. Loaded with `pytest -p docker_stub`.
"""

import pytest


class _Services:
    """Answers the calls conftest.py makes; the server is already up."""

    def start(self, *names):
        return None

    def wait_for_service(self, *args, **kwargs):
        return None


@pytest.fixture(scope="session")
def docker_services():
    return _Services()

"""The unit tier's rule, enforced: a unit test runs no server — nothing listens on a socket (a real uvicorn, an
HTTP stand-in or a database server belongs in tests/integration/).  hqa's own SPARQL worker process over the
session's knowledge pack is allowed here: it is how the pack's KG is read, not a server."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture(autouse=True)
def _no_server(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise AssertionError("a unit test runs no server (this one listens on a socket): move it to "
                             "tests/integration/")

    monkeypatch.setattr(socket.socket, "listen", refuse)

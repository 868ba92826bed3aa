"""gputui.ui imports asyncio without ssl (OpenSSL: ~4.5 MiB resident the TUI never uses), and ssl stays
importable for those who do use it (gputui fleet's https). In a fresh interpreter: a test process has
asyncio and ssl loaded long before (pytest-asyncio), where the module does nothing."""

from __future__ import annotations

import subprocess
import sys

from gputui.ui._asyncio_lean import import_asyncio_without_tls

_CHILD = """
import sys
import gputui.ui
import asyncio.base_events, asyncio.sslproto
print("ssl" in sys.modules, asyncio.sslproto.ssl is None, asyncio.base_events.ssl is None)
import ssl, http.client
print(ssl.PROTOCOL_TLS_CLIENT is not None, hasattr(http.client, "HTTPSConnection"))
"""


def test_the_tui_loads_no_openssl_and_ssl_stays_importable() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    assert out == ["False", "True", "True", "True", "True"]


def test_nothing_changes_where_asyncio_is_already_imported() -> None:
    assert "asyncio" in sys.modules  # (pytest-asyncio's)
    assert import_asyncio_without_tls() is False
    assert sys.modules.get("ssl") is not None

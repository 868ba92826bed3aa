"""asyncio without TLS: the TUI's event loop never opens a TLS connection, and asyncio's own `import ssl`
loads OpenSSL, ~4.5 MiB resident (`make bench`: the TUI's peak RSS 42 -> 38 MiB).

asyncio takes a failed `import ssl` as "no TLS here" (base_events, selector_events and sslproto each
`try: import ssl except ImportError: ssl = None`). So `ssl` is refused while asyncio is imported, and only
then: a later `import ssl` (gputui fleet's https, through http.client in a thread) gets the real module.
What goes is TLS through asyncio's own transports (loop.create_connection(ssl=...)), which nothing here
uses. Called by gputui.ui's __init__, before Textual is imported, while one thread runs (the command line
imports gputui.ui before it starts any). Does nothing when asyncio or ssl is already imported (tests).
"""

from __future__ import annotations

import sys


def import_asyncio_without_tls() -> bool:
    """Import asyncio with no ssl module; False when asyncio or ssl was already imported."""
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return False
    sys.modules["ssl"] = None  # type: ignore[assignment]  # how the import system spells "no such module"
    try:
        import asyncio  # noqa: F401
    finally:
        del sys.modules["ssl"]
    return True

"""The Textual app. Only this package imports Textual."""

from gputui.ui._asyncio_lean import import_asyncio_without_tls

import_asyncio_without_tls()  # before Textual imports asyncio: no OpenSSL in the TUI (see the module)

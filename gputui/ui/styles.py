"""The styles in gputui.tcss, by section: each widget and screen class takes its own as DEFAULT_CSS (see
the file's head for why not App.CSS_PATH). Read once, on the first widget class defined."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

TCSS = Path(__file__).with_name("gputui.tcss")
_SECTION = re.compile(r"^/\* @section (\w+) \*/$", re.MULTILINE)


@cache
def sections() -> dict[str, str]:
    """Section name -> its text, up to the next section."""
    parts = _SECTION.split(TCSS.read_text(encoding="utf-8"))
    return {name: text.strip() + "\n" for name, text in zip(parts[1::2], parts[2::2], strict=True)}


def tcss(*names: str) -> str:
    """The named sections, in order (`tcss("Modal", "KillScreen")`): a KeyError names a missing one."""
    return "".join(sections()[name] for name in names)

"""Styled text to terminal bytes, sending only what changes between one style and the next.

Textual writes every segment as `ESC[<style>m text ESC[0m`: the full style and a reset, even when the
segment next to it has the same background and differs in one colour. On gputui's tick, where a changed
digit is one cell, that was ~25 bytes of style per byte of text (`make bench`'s tui: 886 of 1,238 B/s).
A `Pen` remembers the style the terminal is in: the same style again costs nothing, a new foreground
only its own code (`ESC[38;5;71m`), and one reset ends the update. What the terminal shows is the same
cell for cell: a cursor move keeps the current style (VT100), and every piece of text is written in its
full style. Used by gputui.ui._textual_compat for partial updates.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.color import ColorSystem
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual.strip import SGR_STYLES, Strip

# (attributes, foreground, background) as SGR parameters; "" for none.
_Codes = tuple[str, str, str]
_PLAIN: _Codes = ("", "", "")
RESET = "\x1b[0m"
_CACHE_MAX = 4096  # styles are few (a palette's), but a theme change makes new ones


class Pen:
    """Writes styled segments one after another, as one stream to the terminal (see the module)."""

    __slots__ = ("_cache", "_color_system", "_out", "_state")

    def __init__(self, console: Console, cache: dict[Style, _Codes] | None = None) -> None:
        # As Strip.render: no colour system means true colour.
        self._color_system = console._color_system or ColorSystem.TRUECOLOR
        self._cache = _CODES.setdefault(self._color_system, {}) if cache is None else cache
        self._state = _PLAIN
        self._out: list[str] = []

    def text(self, text: str) -> None:
        """Unstyled text: written in the terminal's default style, as Textual writes it."""
        self._set(_PLAIN)
        self._out.append(text)

    def move(self, sequence: str) -> None:
        """A cursor movement: the terminal keeps its style across it."""
        self._out.append(sequence)

    def strip(self, segments: Iterable[Segment]) -> None:
        for text, style, control in segments:
            if control:
                continue
            if style is None:
                self.text(text)
            elif style._link:  # a hyperlink: Textual's own bytes, from and back to the plain style
                self._set(_PLAIN)
                self._out.append(Strip.render_style(style, text, self._color_system))
            else:
                self._set(self._codes(style))
                self._out.append(text)

    def done(self) -> str:
        """Everything written, ending in the plain style."""
        self._set(_PLAIN)
        out, self._out = "".join(self._out), []
        return out

    def _codes(self, style: Style) -> _Codes:
        codes = self._cache.get(style)
        if codes is None:
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            codes = self._cache[style] = codes_of(style, self._color_system)
        return codes

    def _set(self, new: _Codes) -> None:
        old = self._state
        if new == old:
            return
        self._state = new
        if new == _PLAIN:
            self._out.append(RESET)
            return
        attrs, fg, bg = new
        # From a reset, the whole style; or what changed: attributes off and on, then colours (39/49:
        # the terminal's default colour). Whichever is shorter.
        whole = ";".join(p for p in ("0", attrs, fg, bg) if p)
        pairs = ((fg, old[1], "39"), (bg, old[2], "49"))
        colours = [value or default for value, was, default in pairs if value != was]
        params = ";".join([*_attribute_changes(old[0], attrs), *colours])
        self._out.append(f"\x1b[{params if len(params) < len(whole) else whole}m")


_CODES: dict[ColorSystem, dict[Style, _Codes]] = {}
# The code that turns an attribute off (of SGR_STYLES's); one turns off two (22: bold and dim).
_OFF = {"1": "22", "2": "22", "3": "23", "4": "24", "21": "24", "5": "25", "6": "25", "7": "27", "8": "28"}
_OFF |= {"9": "29", "51": "54", "52": "54", "53": "55"}


def _attribute_changes(old: str, new: str) -> list[str]:
    """SGR parameters from attributes `old` to `new` (each `;`-joined, as codes_of writes them)."""
    was, now = set(filter(None, old.split(";"))), set(filter(None, new.split(";")))
    if was == now:
        return []
    off = {_OFF[a] for a in was - now}
    # Attributes kept whose off-code is sent (bold kept, dim dropped) are set again after it.
    on = (now - was) | {a for a in now & was if _OFF[a] in off}
    return [*sorted(off), *sorted(on, key=SGR_STYLES.index)]


def codes_of(style: Style, color_system: ColorSystem) -> _Codes:
    """The style's SGR parameters, as Strip.render_ansi writes them, in three parts."""
    attributes = style._attributes & style._set_attributes
    attrs = ";".join(SGR_STYLES[bit] for bit in range(attributes.bit_length()) if attributes & (1 << bit))
    fg = ";".join(style._color.downgrade(color_system).get_ansi_codes()) if style._color is not None else ""
    bg = (
        ";".join(style._bgcolor.downgrade(color_system).get_ansi_codes(False))
        if style._bgcolor is not None
        else ""
    )
    return attrs, fg, bg

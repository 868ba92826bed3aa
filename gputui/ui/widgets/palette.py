"""Styles for threshold colours, taken from the current Textual theme so every theme reads right."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.style import Style
from textual.theme import Theme

from gputui.model import GpuSample


@dataclass(frozen=True)
class Palette:
    plain: Style
    dim: Style
    title: Style
    good: Style
    warning: Style
    error: Style
    accent: Style
    header: Style
    cursor: Style
    # Laid over the sparkline cells a detected dip touches: a colour for the glyph only, never a
    # background. A dip background under a bar of the same hue drew a full block, and the ▼ on it
    # vanished: NO_COLOR's grey filter and 16-colour terminals map the two to one colour.
    dip: Style

    @classmethod
    def from_theme(cls, theme: Theme) -> Palette:
        fg = _rich(theme.foreground) or ("#e0e0e0" if theme.dark else "#202020")
        primary = _rich(theme.primary)
        accent = _rich(theme.accent) or primary
        error = _rich(theme.error) or "red"
        return cls(
            plain=Style(color=fg),
            dim=Style(color=fg, dim=True),
            title=Style(color=accent, bold=True),
            good=Style(color=_rich(theme.success) or "green"),
            warning=Style(color=_rich(theme.warning) or "yellow"),
            error=Style(color=error, bold=True),
            accent=Style(color=primary),
            header=Style(color=accent, bold=True),
            cursor=Style(color=_rich(theme.foreground) or "white", bgcolor=primary, bold=True),
            dip=Style(color=error, bold=True),
        )

    @classmethod
    def default(cls) -> Palette:
        return cls(
            Style(),
            Style(dim=True),
            Style(bold=True),
            Style(color="green"),
            Style(color="yellow"),
            Style(color="red", bold=True),
            Style(color="blue"),
            Style(bold=True),
            Style(reverse=True),
            Style(color="red", bold=True),
        )

    def util_style(self, busy: bool) -> Callable[[float | None], Style]:
        """High utilization is good; low is a warning only while a process is on the GPU."""
        return self._util_busy if busy else self._util_idle

    def _util_busy(self, v: float | None) -> Style:
        if v is None:
            return self.dim
        return self.good if v >= 70 else self.warning if v >= 30 else self.error

    def _util_idle(self, v: float | None) -> Style:
        return self.dim if v is None or v < 5 else self.plain

    def mem_style(self, v: float | None) -> Style:
        if v is None:
            return self.dim
        return self.error if v >= 95 else self.warning if v >= 85 else self.accent

    def temp_style(self, v: float | None) -> Style:
        if v is None:
            return self.dim
        return self.error if v >= 85 else self.warning if v >= 75 else self.plain

    def power_style(self, g: GpuSample) -> Style:
        if g.power is None:
            return self.dim
        if g.power_limit and g.power >= 0.97 * g.power_limit:
            return self.warning
        return self.plain


def _rich(color: str | None) -> str | None:
    """A theme's colour as Rich names it: Textual's 16-colour themes (ansi-dark, ansi-light) say
    `ansi_red`, `ansi_default`, which Rich calls `red`, `default`."""
    return color.removeprefix("ansi_") if color else None

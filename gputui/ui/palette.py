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
    dip: Style  # laid over sparkline cells inside a detected dip

    @classmethod
    def from_theme(cls, theme: Theme) -> Palette:
        fg = theme.foreground or ("#e0e0e0" if theme.dark else "#202020")
        return cls(
            plain=Style(color=fg),
            dim=Style(color=fg, dim=True),
            title=Style(color=theme.accent or theme.primary, bold=True),
            good=Style(color=theme.success or "green"),
            warning=Style(color=theme.warning or "yellow"),
            error=Style(color=theme.error or "red", bold=True),
            accent=Style(color=theme.primary),
            header=Style(color=theme.accent or theme.primary, bold=True),
            cursor=Style(color=theme.foreground or "white", bgcolor=theme.primary, bold=True),
            dip=Style(bgcolor=theme.error or "red"),
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
            Style(bgcolor="red"),
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

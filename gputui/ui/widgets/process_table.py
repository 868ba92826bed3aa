"""The process table: a cursor that stays on its process, and repaints of only the cells that changed.

Why not Textual's DataTable: any cell update there invalidates every render cache of the table, so a
tick that changes one number per row re-renders every cell of every row. Measured in `make bench`
(8 GPUs, 1 Hz) that alone cost 2 % of a core, over the whole budget. Drawn on a CellCanvas, a tick costs
one line build per visible row and sends only the changed cells.

The table owns what the user changes in it and what it keeps between builds: which ranks show their
workers (`f`, `F`), how far COMMAND is scrolled (←/→), which columns are hidden (`c`), and the cache of
built rows.

Widths: every column but COMMAND is as wide as its header and its widest cell among the rows (up to a
cap: a long user name is cut, not the command); a column with nothing in any row (CLASS when every
process is ok) is left out; COMMAND takes the rest. When that rest is under `min_last_width`, columns
go in _DROP_ORDER. A command line wider than its cell keeps the words that tell it apart from its
siblings (see command_fit); the highlighted row is said in full in the free rows below (see row_note).
"""

from __future__ import annotations

from functools import lru_cache
from operator import attrgetter

from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.message import Message

from gputui import cells
from gputui.model import Snapshot
from gputui.ui.styles import tcss
from gputui.ui.widgets.canvas import PLAIN, Cell, Line
from gputui.ui.widgets.command_fit import squeeze, telling_words
from gputui.ui.widgets.cursor_table import CursorTable
from gputui.ui.widgets.process_rows import COLUMNS, Folding, RowCache, TableRow, View, build_rows
from gputui.ui.widgets.row_note import RowNote, note_for, note_lines

_GAP = 1  # spaces between columns
MIN_COMMAND = 28  # "+3 python -IS demo_train.py": what a row is
SCROLL_STEP = 8  # cells per ←/→
# Dropped first when the terminal is too narrow for every column and a readable command line.
_DROP_ORDER = ("bw", "time", "rss", "kinds", "job", "state", "cpu", "user", "category")
ALWAYS_SHOWN = frozenset({"pid", "command"})
# The most cells a column takes, whatever its content (a longer value is cut with …): Column.width,
# but for these. In the jobs view (J) JOB is what the rows are about.
_CAPS = {"gpu": 8, "pid": 8, "user": 12, "state": 10, "job": 20}
_JOB_CAP_IN_JOBS_VIEW = 40
_NOTE_MIN_ROWS = 2  # a rule and one line: fewer free rows show no note
_PLAIN = attrgetter("plain")  # a cell's text


@lru_cache(maxsize=256)
def _style(style: str | Style) -> Style:
    return style if isinstance(style, Style) else Style.parse(style) if style else PLAIN


def fit(text: str, width: int, justify: str = "left") -> str:
    """`text` in exactly `width` terminal cells: cut with `…`, padded with spaces (a CJK character takes
    two cells, a combining mark none)."""
    return cells.pad(text, width, right=justify == "right")


def skip_cells(text: str, count: int) -> str:
    """`text` without its first `count` cells; a wide character cut in half leaves a space."""
    if count <= 0:
        return text
    if text.isascii():
        return text[count:]
    skipped = 0
    for i, ch in enumerate(text):
        if skipped >= count:
            rest = text[i:]
            return " " * (skipped - count) + rest
        skipped += cells.width(ch)
    return " " * max(0, skipped - count)


class ProcessTable(CursorTable):
    DEFAULT_CSS = tcss("ProcessTable")
    BINDINGS = [
        Binding("enter", "choose", "Detail", show=False),
        Binding("f", "fold", "Workers", show=False),
        Binding("F", "fold_all", "All workers", show=False),
        Binding("left", "scroll_command(-1)", "Scroll left", show=False),
        Binding("right", "scroll_command(1)", "Scroll right", show=False),
    ]

    class HeaderClicked(Message):
        def __init__(self, column: str) -> None:
            super().__init__()
            self.column = column

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[TableRow] = []
        self.sort_column = "gpu"
        self.sort_reverse = False
        self.empty_note = "no GPU processes"
        self.tagged: set[str] = set()
        self.last_label = "COMMAND"
        self.min_last_width = MIN_COMMAND
        self.header_style = Style(bold=True)
        self.cursor_style = Style(reverse=True)
        self.tag_style = Style(bold=True, underline=True)
        # The last build's line of every row, by id: a row that did not change is the same TableRow
        # object (process_rows reuses them), so its line is reused rather than built again.
        self._built: dict[int, tuple[TableRow, tuple[object, ...], Line]] = {}
        # The cells of one column's cell and its gap, by what they show: this build's and the last's.
        self._pieces: dict[tuple[object, ...], list[Cell]] = {}
        self._pieces_last: dict[tuple[object, ...], list[Cell]] = {}
        self.row_cache = RowCache()
        self.folding = Folding()
        self.command_offset = 0  # cells of COMMAND scrolled off to the left
        self._hidden: frozenset[str] = frozenset()
        self._has_owners = False
        self._source: tuple[Snapshot, View, dict[str, Style]] | None = None
        # The widths the rows' cells need and their commands' telling words, measured once per set of rows.
        self._measured: list[TableRow] | None = None
        self._needs: dict[int, int] = {}
        self._needs_of = False  # whether the widths in _needs are those of the jobs view's rows
        self._telling: dict[str, frozenset[int]] = {}
        self.note: RowNote | None = None  # the note under the table, when the app has one

    # -- rows ----------------------------------------------------------------------------------------

    def show(self, snap: Snapshot, view: View, styles: dict[str, Style] | None = None) -> None:
        """Show `snap`'s processes as `view` says, with this table's folding; kept for the next rebuild
        (a fold toggled between two ticks)."""
        self._source = (snap, view, styles or {})
        # JOB only when some process is a container's, a pod's or a SLURM job's (most boxes: none).
        self._has_owners = view.jobs or any(p.owner is not None for p in snap.processes)
        self._rebuild()

    def _rebuild(self, cursor_to: str = "") -> None:
        if self._source is None:
            return
        snap, view, styles = self._source
        rows = build_rows(snap, view, styles, self.row_cache, self.folding)
        ranks = {r.key for r in rows if r.workers}
        if not self.folding.expanded <= ranks:  # forget the ranks that are gone (or filtered out)
            self.folding = Folding(self.folding.expand_all, self.folding.expanded & ranks)
        self.apply(rows, cursor_to)

    @property
    def workers_folded(self) -> bool:
        """Workers are folded under their ranks unless expanded one by one (the default, and a setting)."""
        return not self.folding.expand_all

    @workers_folded.setter
    def workers_folded(self, folded: bool) -> None:
        self.folding = Folding(expand_all=not folded)
        self._rebuild()

    @property
    def hidden(self) -> frozenset[str]:
        """The columns the user hid (`c`, and a setting). PID and COMMAND always show: a row needs them."""
        return self._hidden

    @hidden.setter
    def hidden(self, keys: frozenset[str]) -> None:
        keys = frozenset(keys) - ALWAYS_SHOWN
        if keys != self._hidden:
            self._hidden = keys
            self.redraw()

    def action_fold(self) -> None:
        """Show or fold the workers of the rank under the cursor (or of the rank of the worker under it)."""
        row = self.current
        if row is None or not (row.workers or row.rank):
            return
        rank = row.rank or row.key
        if self.folding.expand_all:  # fold this one back: every other rank stays open
            others = {r.key for r in self.rows if r.workers and r.key != rank}
            self.folding = Folding(False, frozenset(others))
        elif rank in self.folding.expanded:
            self.folding = Folding(False, self.folding.expanded - {rank})
        else:
            self.folding = Folding(False, self.folding.expanded | {rank})
        self._rebuild(cursor_to=rank if row.rank else "")

    def action_fold_all(self) -> None:
        """Show every rank's workers, or fold them all."""
        row = self.current
        self.workers_folded = self.folding.expand_all or bool(self.folding.expanded)
        if row is not None and row.rank and self.workers_folded:
            self._rebuild(cursor_to=row.rank)

    def action_scroll_command(self, direction: int) -> None:
        """Scroll COMMAND by SCROLL_STEP cells; never past the end of the longest command shown."""
        longest = max((cells.width(self.rows[i].cells[-1].plain) for i in self.visible_rows()), default=0)
        room = self._layout(self.size.width)[-1][1] if self.size.width else 0
        limit = max(0, longest - room + SCROLL_STEP)
        offset = max(0, min(self.command_offset + direction * SCROLL_STEP, limit))
        if offset != self.command_offset:
            self.command_offset = offset
            self.redraw()

    # -- drawing -------------------------------------------------------------------------------------

    @property
    def current(self) -> TableRow | None:
        return super().current

    def _measure(self) -> None:
        """The cells each column's widest value takes among the rows, and the telling words of their
        command lines: once per new list of rows (a tick), not once per drawing (a cursor move)."""
        if self._measured is self.rows:
            return
        self._measured = self.rows
        # Widths grow, never shrink back, while the kind of rows stays (processes, or jobs): a CPU% that
        # goes 99.9 -> 100.0 -> 99.9 would otherwise move every column every tick (and repaint them all).
        kind = self._source is not None and self._source[1].jobs
        if kind != self._needs_of:
            self._needs_of, self._needs = kind, {}
        needs = {i: self._needs.get(i, 0) for i in range(len(COLUMNS) - 1)}
        columns = list(zip(*(row.cells for row in self.rows), strict=True))
        for i in needs if columns else ():
            # Rows that show the same value share its cell (CellMemo): each one measured once.
            unique = dict(zip(map(id, columns[i]), columns[i], strict=True)).values()
            needs[i] = max(needs[i], max(map(cells.width, filter(None, map(_PLAIN, unique))), default=0))
        self._needs = needs
        commands = {r.cells[-1].plain[r.command_at :] for r in self.rows if r.command_at >= 0}
        self._telling = telling_words(tuple(sorted(commands)))

    def _cap(self, key: str) -> int:
        jobs = self._source is not None and self._source[1].jobs
        if key == "job" and jobs:
            return _JOB_CAP_IN_JOBS_VIEW
        return _CAPS.get(key, next(c.width for c in COLUMNS if c.key == key))

    def _layout(self, width: int) -> list[tuple[int, int]]:
        """(column index, width) of the columns that fit; the command line takes what is left."""
        self._measure()
        hidden = self._hidden if self._has_owners else self._hidden | {"job"}
        shown = [
            i
            for i in range(len(COLUMNS) - 1)
            if COLUMNS[i].key not in hidden
            and (self._needs.get(i) or not self.rows or COLUMNS[i].key == "pid")
        ]
        widths = {}
        for i in shown:
            key = COLUMNS[i].key
            label = cells.width(COLUMNS[i].label) + (key == self.sort_column)  # room for ▲ / ▼
            widths[i] = max(label, min(self._cap(key), self._needs.get(i, 0)))
        drop = [i for key in _DROP_ORDER for i, c in enumerate(COLUMNS) if c.key == key and i in shown]

        def used() -> int:
            return sum(widths[i] + _GAP for i in shown)

        while drop and width - used() < self.min_last_width:
            shown.remove(drop.pop(0))
        return [(i, widths[i]) for i in shown] + [(len(COLUMNS) - 1, max(8, width - used()))]

    def build(self, width: int) -> list[Line]:
        layout = self._layout(width)
        header = Line()
        for i, w in layout:
            col = COLUMNS[i]
            label = self.last_label if i == len(COLUMNS) - 1 else col.label
            if i == len(COLUMNS) - 1 and self.command_offset:
                label += f" ◂{self.command_offset}"  # scrolled: how far, and ← goes back
            if col.key == self.sort_column:
                label += "▼" if self.sort_reverse != col.descending else "▲"  # ▼: biggest first
            header.add(fit(label, w, col.justify) + " " * _GAP, self.header_style)
        lines = [header]
        if not self.rows:
            return [*lines, Line().add(f" {self.empty_note}", Style(dim=True))]
        focused = self.has_focus
        built: dict[int, tuple[TableRow, tuple[object, ...], Line]] = {}
        for i in self.visible_rows():
            row = self.rows[i]
            how = (
                layout,
                i == self.cursor,
                row.key in self.tagged,
                focused,
                self.cursor_style,
                self.tag_style,
                self.command_offset,
                id(self._telling),  # a new sibling changes which words tell a command apart
            )
            last = self._built.get(id(row))
            line = last[2] if last and last[0] is row and last[1] == how else self._line(row, *how)
            built[id(row)] = (row, how, line)
            lines.append(line)
        self._built = built
        self._pieces_last, self._pieces = self._pieces, {}
        self._show_note(width)
        return lines

    def _show_note(self, width: int) -> None:
        """The highlighted row in full, in the rows the table leaves free (see row_note). Its height comes
        from the table's: the free rows are the table's plus the note's own."""
        note = self.note
        if note is None or not note.is_attached:
            return
        row = self.current
        free = self.size.height - 1 - len(self.rows) + note.size.height
        lines: list[Line] = []
        if row is not None and free >= _NOTE_MIN_ROWS:
            snap = self._source[0] if self._source is not None else None
            lines = note_lines(note_for(row, snap), width, free, note.palette)
        note.lines = lines  # its watcher redraws it
        if note.styles.height is None or note.styles.height.value != len(lines):
            note.styles.height = len(lines)  # the table gives (or takes back) those rows

    def _line(
        self,
        row: TableRow,
        layout: list[tuple[int, int]],
        on_cursor: bool,
        tagged: bool,
        focused: bool,
        cursor_style: Style,
        tag_style: Style,
        command_offset: int,
        telling: int,
    ) -> Line:
        line = Line()
        last = len(COLUMNS) - 1
        gap_style = cursor_style if on_cursor and focused else PLAIN
        pieces, pieces_last = self._pieces, self._pieces_last
        for c, w in layout:
            cell, col = row.cells[c], COLUMNS[c]
            text = cell.plain
            if c != last:
                # A cell and its gap, drawn once per build for all the rows that show the same text the same
                # way (a tick changes a few numbers per row). A blank cell takes the ink of the cells
                # before it (Line.add): that ink is part of its key.
                before = line.cells[-1][1] if line.cells and not text.strip(" ") else None
                key = (
                    text,
                    w,
                    col.justify,
                    cell.style,
                    tag_style if tagged else None,
                    (cursor_style, focused) if on_cursor else None,
                    before,
                )
                piece = pieces.get(key) or pieces_last.get(key)
                if piece is None:
                    piece = self._piece(text, w, col.justify, cell.style, tagged, on_cursor, focused, before)
                pieces[key] = piece
                line.cells += piece
                continue
            style = self._cell_style(cell.style, tagged, on_cursor, focused)
            if command_offset:  # the fold mark and tree branches stay where they are
                text = text[: row.lead] + skip_cells(text[row.lead :], command_offset)
            elif row.command_at >= 0 and cells.width(text) > w:
                before_command, command = text[: row.command_at], text[row.command_at :]
                keep = self._telling.get(command, frozenset())
                text = before_command + squeeze(command, keep, w - cells.width(before_command))
            line.add(fit(text, w, col.justify), style)
            line.add(" " * _GAP, gap_style)
        return line

    def _cell_style(self, style: str | Style, tagged: bool, on_cursor: bool, focused: bool) -> Style:
        out = _style(style)
        if tagged:
            out = out + self.tag_style
        if on_cursor:
            out = out + self.cursor_style if focused else out + Style(underline=True)
        return out

    def _piece(
        self,
        text: str,
        width: int,
        justify: str,
        style: str | Style,
        tagged: bool,
        on_cursor: bool,
        focused: bool,
        before: Style | None,
    ) -> list[Cell]:
        """The cells of one cell of a row and the gap after it; `before`: the ink of the cell before a
        blank one."""
        line = Line()
        if before is not None:
            line.cells.append((" ", before))
        line.add(fit(text, width, justify), self._cell_style(style, tagged, on_cursor, focused))
        line.add(" " * _GAP, self.cursor_style if on_cursor and focused else PLAIN)
        return line.cells[1:] if before is not None else line.cells

    def on_click(self, event: events.Click) -> None:
        """A click on a rank's `+3` / `-3` shows or folds its workers; anywhere else, CursorTable's handler
        (Textual calls the handler of every class in the MRO: prevent_default() stops the base one)."""
        index = self.top + event.y - 1
        row = self.rows[index] if event.y > 0 and 0 <= index < len(self.rows) else None
        if row is not None and row.workers:
            left = sum(w + _GAP for _, w in self._layout(self.size.width)[:-1])  # where COMMAND starts
            mark = len(f"+{len(row.workers)} ")  # the last characters of the row's lead
            start = left + row.lead - mark  # the lead does not scroll
            if start <= event.x < start + mark - 1:
                event.prevent_default()
                self.cursor = index
                self.action_fold()

    def on_header_click(self, x: int) -> None:
        left = 0
        for i, w in self._layout(self.size.width):
            if left <= x < left + w + _GAP:
                self.post_message(self.HeaderClicked(COLUMNS[i].key))
                return
            left += w + _GAP

"""The note under the process table: the highlighted row in full, in the table's free rows.

A row has one line, so its command, its class's reason and a job's name are cut at the table's edge.
When the table leaves rows empty (8 ranks on a 40-row terminal leave 11), the highlighted row is said
there again, wrapped: the whole command line, why it is in its class, what an estimated amount means,
who likely holds a GPU's unaccounted memory. It takes only rows the table does not need, so it never
hides a process; with no room it is not drawn (→ scrolls COMMAND, Enter opens the detail).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from textual.reactive import var

from gputui.analyze.classify import OK, Leftover, estimated, leftovers
from gputui.cells import width as cells_of
from gputui.model import ProcessRow, Snapshot
from gputui.ui.styles import tcss
from gputui.ui.widgets.canvas import CellCanvas, Line
from gputui.ui.widgets.palette import Palette
from gputui.ui.widgets.process_rows import AGENT_ONLY, JOB, UNACCOUNTED, TableRow
from gputui.ui.widgets.wrap import wrap_at_most, wrap_cells
from gputui.units import NA, fmt_bytes, printable

PLAIN, DIM, WARNING = "plain", "dim", "warning"


@dataclass(frozen=True)
class Note:
    title: str
    paragraphs: tuple[tuple[str, str], ...]  # (text, PLAIN / DIM / WARNING)


def holders_text(left: Leftover) -> str:
    """Who likely holds a GPU's unaccounted memory, and why they are only likely."""
    gpu, memory = left.gpu, fmt_bytes(left.memory)
    if not left.holders:
        return (
            f"{memory} of GPU {gpu}'s memory is in use and no process in NVML's lists accounts for it. No "
            f"orphan or child of a defunct process here holds GPU {gpu}: it may be a process's in another "
            "container (not visible here), or the driver's. Nothing to signal."
        )
    who = "; ".join(
        f"{p.pid} {printable(p.user or NA)} {p.category} {printable(p.command or p.name or NA)}"
        for p in left.holders
    )
    share = estimated(left.share) if left.share is not None else NA
    return (
        f"{memory} of GPU {gpu}'s memory is in use and no process in NVML's lists accounts for it. Likely "
        f"holders (they hold /dev/nvidia{gpu} but NVML lists no memory for them, and their job is over), "
        f"{share} each if split evenly: {who}. Enter lists them · k signals them, after confirmation."
    )


def estimate_text(left: Leftover) -> str:
    share = estimated(left.share) if left.share is not None else NA
    n = len(left.holders)
    return (
        f"GPU memory {share}: an estimate (~), not measured (?). GPU {left.gpu} has {fmt_bytes(left.memory)} "
        f"that no process in NVML's lists accounts for, split evenly among its {n} likely "
        f"holder{'s' if n > 1 else ''} ({', '.join(str(p.pid) for p in left.holders)}): each holds "
        f"/dev/nvidia{left.gpu}, NVML lists no memory for it, and its job is over."
    )


def note_for(row: TableRow, snap: Snapshot | None) -> Note:
    if row.kind == UNACCOUNTED and row.leftover is not None:
        left = row.leftover
        return Note(f"GPU {left.gpu}: {fmt_bytes(left.memory)} unaccounted", ((holders_text(left), WARNING),))
    if row.kind == JOB:
        members = {p.pid: p for p in row.members}
        owner = next((p.owner for p in members.values() if p.owner is not None), None)
        label = printable(owner.label + (f" ({owner.name})" if owner.name else "")) if owner else "no job"
        from gputui.ui.widgets.dip_groups import compact_gpus  # (J only: see process_columns)

        gpus = compact_gpus(sorted({p.gpu for p in row.members if p.gpu is not None}))
        pids = ", ".join(str(pid) for pid in sorted(members))
        return Note(label, ((f"GPU {gpus or NA} · processes {pids}", PLAIN),))
    p = row.process
    agent = snap.agents.get(row.pid) if snap is not None else None
    paragraphs: list[tuple[str, str]] = []
    if row.kind == AGENT_ONLY:
        cuda = (
            ""
            if agent is None
            else " (CUDA initialized)"
            if agent.cuda_initialized
            else " (CUDA not started)"
        )
        paragraphs.append((f"runs the gputui agent and holds no GPU{cuda}: a opens its allocator panel", DIM))
    if p is None:
        return Note(f"pid {row.pid}", tuple(paragraphs))
    category = getattr(p, "category", OK)
    title = f"pid {p.pid} · {printable(p.user or NA)}" + (f" · {category}" if category != OK else "")
    if isinstance(p, ProcessRow) and not p.visible:
        paragraphs.append(("not visible here: another PID namespace (a container), or gone", DIM))
    else:
        paragraphs.append((printable(p.command or p.name or NA), PLAIN))
    reason = getattr(p, "reason", "")
    if category != OK and reason:
        paragraphs.append((printable(f"{category}: {reason}"), WARNING))
    if hung := getattr(p, "hung", None):
        paragraphs.append((printable(f"hung? {hung}"), WARNING))
    if isinstance(p, ProcessRow) and not p.kinds and p.gpu is not None and snap is not None:
        held = leftovers(snap).get(p.gpu)
        if held is not None and any(h.pid == p.pid for h in held.holders):
            paragraphs.append((estimate_text(held), WARNING))
    return Note(title, tuple(paragraphs))


def note_lines(note: Note, width: int, rows: int, palette: Palette) -> list[Line]:
    """The note in at most `rows` lines of `width` cells: a rule with its title, then its paragraphs,
    wrapped; the last line ends with `…` when something did not fit."""
    if rows <= 0 or width < 8:
        return []
    styles: dict[str, Style] = {PLAIN: palette.plain, DIM: palette.dim, WARNING: palette.warning}
    title = f"── {note.title} "
    rule = Line().add(title[: width - 1], palette.dim)
    rule.add("─" * max(0, width - cells_of(title)), palette.dim)
    lines = [rule]
    body: list[tuple[str, str]] = [
        (part, style) for text, style in note.paragraphs for part in wrap_cells(text, width - 1)
    ]
    room = rows - 1
    if len(body) > room:  # what does not fit joins the last line, which then ends with …
        rest = " ".join(text for text, _ in body[room - 1 :]) if room > 0 else ""
        body = (
            [*body[: room - 1], (wrap_at_most(rest, width - 1, 1)[0], body[room - 1][1])] if room > 0 else []
        )
    lines += [Line().add(" " + text, styles[style]) for text, style in body]
    return lines


class RowNote(CellCanvas):
    """Drawn by the process table (ProcessTable.note): its height is the table's free rows it uses."""

    DEFAULT_CSS = tcss("RowNote")

    # Setting it redraws the note (always: the table hands a new list each time it draws).
    lines: var[list[Line]] = var(list, always_update=True, init=False)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.palette = Palette.default()

    def watch_lines(self) -> None:
        self.redraw()

    def build(self, width: int) -> list[Line]:
        return self.lines

"""The keys of both apps, written once: each app's table yields its BINDINGS (and so its key bar), its
help screen and its command-palette commands.

A table is the help screen's rows, in the help screen's order; each row holds the keys it describes.
The key bar shows the first key of each action named in `bar`, in that order (Textual's key bar order
is the order of BINDINGS, so the shown keys come first). A key either offers a palette command or says
why it has none (HIDDEN: not offered; TEXTUAL: Textual's own command does it, as Quit).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal

from textual.binding import Binding, BindingType

HIDDEN: Final = "hidden"
TEXTUAL: Final = "textual"


@dataclass(frozen=True, slots=True)
class Offer:
    """A command in the palette: its title and its one-line help."""

    title: str
    help: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Key:
    """One action on one set of keys. `keys`: Textual's key names ("s,f6"); "" when another widget binds
    the key itself (Enter is the process table's) and only the palette command is the app's."""

    keys: str
    action: str
    label: str = ""  # the key bar's word
    display: str | None = None  # the key as the key bar shows it, where not the first key's own name
    priority: bool = False  # handled as the key arrives, before the focused widget sees it
    palette: Offer | Literal["hidden", "textual"]

    @property
    def name(self) -> str:
        """The action without its arguments: `zoom(-1)` -> `zoom`, as check_action is asked."""
        return self.action.partition("(")[0]


@dataclass(frozen=True, slots=True)
class Row:
    """One row of the help screen: the keys as it writes them, what they do, and the keys it describes
    (none for a note, or for a key another widget binds: f, ←, Ctrl+P)."""

    shown: str
    text: str
    keys: tuple[Key, ...] = ()


@dataclass(frozen=True, slots=True)
class KeyTable:
    rows: tuple[Row, ...]
    bar: tuple[str, ...]  # the actions the key bar shows, in its order

    def __post_init__(self) -> None:
        actions = {k.action for k in self.every_key() if k.keys}
        missing = [a for a in self.bar if a not in actions]
        assert not missing, f"the key bar names actions no key is bound to: {missing}"
        names = [name for k in self.every_key() for name in k.keys.split(",") if name]
        assert len(names) == len(set(names)), f"a key is bound twice: {names}"

    def every_key(self) -> Iterator[Key]:
        for row in self.rows:
            yield from row.keys

    def help(self) -> list[tuple[str, str]]:
        """The help screen's rows: (the keys, what they do)."""
        return [(row.shown, row.text) for row in self.rows]

    def bindings(self) -> list[BindingType]:
        """The app's BINDINGS: the key bar's actions first, in its order (the first key of each shows),
        then the other keys in the table's order."""
        bound = [k for k in self.every_key() if k.keys]
        ordered = sorted((k for k in bound if k.action in self.bar), key=lambda k: self.bar.index(k.action))
        ordered += [k for k in bound if k.action not in self.bar]
        shown = {id(next(k for k in bound if k.action == action)) for action in self.bar}
        return [_binding(k, show=id(k) in shown) for k in ordered]

    def offers(self) -> Iterator[tuple[Key, Offer]]:
        """The palette's commands, in the help screen's order (the palette lists them by title)."""
        for key in self.every_key():
            if isinstance(key.palette, Offer):
                yield key, key.palette


def _binding(key: Key, show: bool) -> Binding:
    return Binding(key.keys, key.action, key.label, show=show, key_display=key.display, priority=key.priority)


# -- shared by both apps ---------------------------------------------------------------------------

HELP = Row(
    "?  F1",
    "this help",
    (Key(keys="question_mark,f1", action="help", label="Help", display="?", palette=HIDDEN),),
)
# Ctrl+C quits, as in htop and nvitop. Textual binds it to "press Ctrl+Q to quit" and, in an Input, to
# copy: priority makes it quit wherever the focus is (there is no text selection to copy here).
QUIT = Row(
    "q  F10  Ctrl+C",
    "quit",
    (
        Key(keys="q", action="quit", label="Quit", palette=TEXTUAL),
        Key(keys="f10", action="quit", label="Quit", palette=TEXTUAL),
        Key(keys="ctrl+c", action="quit", label="Quit", priority=True, palette=TEXTUAL),
    ),
)
SHARED = KeyTable((HELP, QUIT), bar=("quit", "help"))

# -- the monitor (GpuTuiApp) -----------------------------------------------------------------------

MONITOR = KeyTable(
    (
        Row(
            "s / S  F6",
            "sort by the next column / reverse the order (or click a column header)",
            (
                Key(
                    keys="s,f6",
                    action="sort_next",
                    label="Sort",
                    display="s",
                    palette=Offer("Sort by next column", "Cycle the table's sort column"),
                ),
                Key(
                    keys="S",
                    action="sort_reverse",
                    label="Reverse",
                    palette=Offer("Reverse sort", "Reverse the process table's order"),
                ),
            ),
        ),
        Row(
            "/  F3  F4",
            "filter by pid, user, command or job (job:81234, pod:trainer-); Esc clears it",
            # Priority: handled as the key arrives, so that the keys read with it go to the filter box.
            (
                Key(
                    keys="slash,f3,f4",
                    action="filter",
                    label="Filter",
                    display="/",
                    priority=True,
                    palette=Offer("Filter processes", "Filter by pid, user or command"),
                ),
            ),
        ),
        Row(
            "t  F5",
            "tree view: GPU processes with their parents and children",
            (
                Key(
                    keys="t,f5",
                    action="tree",
                    label="Tree",
                    display="t",
                    palette=Offer("Tree view", "Show GPU processes with parents and children"),
                ),
            ),
        ),
        Row(
            "g",
            "choose a GPU: the table shows its processes (g again: all GPUs)",
            (
                Key(
                    keys="g",
                    action="choose_gpu",
                    label="GPU",
                    palette=Offer("Choose GPU", "Show one GPU's processes"),
                ),
            ),
        ),
        Row(
            "Enter",
            "process detail (◆ rows too): command line, cwd, CUDA_VISIBLE_DEVICES, devices, children",
            (
                Key(
                    keys="",  # the process table's own Enter (RowChosen)
                    action="detail",
                    palette=Offer("Process detail", "Details of the highlighted process"),
                ),
            ),
        ),
        Row(
            "",
            "an `unaccounted` row (memory no NVML process accounts for): Enter lists its likely holders "
            "(orphans and children of defunct processes that hold the GPU), k offers to signal them",
        ),
        Row(
            "~ ?",
            "`~4.8 GiB?` in GPU MEM: an estimate, not a measurement: the GPU's unaccounted memory split "
            "among its likely holders",
        ),
        Row(
            "z",
            "zombies: only the suspicious processes (defunct, orphaned, unseen by NVML, ...) and why",
            (
                Key(
                    keys="z",
                    action="zombies",
                    label="Zombies",
                    palette=Offer("Zombies", "Only the suspicious processes, with reasons"),
                ),
            ),
        ),
        Row(
            "J",
            "jobs: a row per container, pod or SLURM job (GPUs, memory, CPU); k: its user's processes",
            (
                Key(
                    keys="J",
                    action="jobs",
                    label="Jobs",
                    palette=Offer("Jobs", "One row per container, pod or SLURM job"),
                ),
            ),
        ),
        Row(
            "space",
            "tag / untag the highlighted process (k then signals every tagged one)",
            (Key(keys="space", action="tag", label="Tag", palette=HIDDEN),),
        ),
        Row(
            "k  F9",
            "send a signal (SIGTERM, SIGINT or SIGKILL) after confirmation",
            (
                Key(
                    keys="k,f9",
                    action="kill",
                    label="Kill",
                    display="k",
                    palette=Offer("Kill", "Signal the highlighted or tagged processes"),
                ),
            ),
        ),
        Row(
            "K",
            "SIGKILL the processes still alive 5 s after a signal",
            (Key(keys="K", action="escalate", label="SIGKILL", palette=HIDDEN),),
        ),
        Row(
            "a",
            "PyTorch allocator panel of a ◆ process (it runs the gputui agent); on another Python process: "
            "attach the agent to it, after confirmation",
            (
                Key(
                    keys="a",
                    action="allocator",
                    label="Allocator",
                    palette=Offer(
                        "Allocator / attach",
                        "PyTorch allocator of the highlighted process; attach gputui's agent to a Python "
                        "without one",
                    ),
                ),
            ),
        ),
        Row(
            "e",
            "events: every utilization dip (when, how long, how deep, why) and per-GPU dip rates",
            (
                Key(
                    keys="e",
                    action="events",
                    label="Events",
                    palette=Offer("Events", "Utilization dips and per-GPU dip rates"),
                ),
            ),
        ),
        Row(
            "D",
            "doctor: why isn't my GPU being used? (this machine, and the highlighted process)",
            (
                Key(
                    keys="D",
                    action="doctor",
                    label="Doctor",
                    palette=Offer("Doctor", "Why isn't my GPU being used?"),
                ),
            ),
        ),
        Row(
            "v",
            "GPU layout: auto, panes, two columns, one line per GPU",
            (Key(keys="v", action="cycle_layout", label="Layout", palette=HIDDEN),),
        ),
        Row(
            "c",
            "choose the process table's columns (hidden ones stay hidden next time)",
            (
                Key(
                    keys="c",
                    action="columns",
                    label="Columns",
                    palette=Offer("Columns", "Show or hide process table columns"),
                ),
            ),
        ),
        Row(
            "f / F",
            "show or fold the workers of the highlighted rank / of every rank (its +3; a click on it too)",
        ),
        Row("← / →", "scroll the COMMAND column"),
        Row(
            "[ / ]",
            "zoom the sparklines in / out (5 min, 15 min, 30 min, 1 h)",
            (
                Key(
                    keys="left_square_bracket",
                    action="zoom(-1)",
                    label="Zoom in",
                    display="[",
                    palette=HIDDEN,
                ),
                Key(
                    keys="right_square_bracket",
                    action="zoom(1)",
                    label="Zoom out",
                    display="]",
                    palette=HIDDEN,
                ),
            ),
        ),
        Row(
            ", / .  < / >",
            "replay only: seek back / forward 10 or 60 samples (p pauses)",
            (
                Key(keys="comma", action="seek(-10)", label="Back 10", display=",", palette=HIDDEN),
                Key(keys="full_stop", action="seek(10)", label="Forward 10", display=".", palette=HIDDEN),
                Key(keys="less_than_sign", action="seek(-60)", label="Back 60", display="<", palette=HIDDEN),
                Key(
                    keys="greater_than_sign",
                    action="seek(60)",
                    label="Forward 60",
                    display=">",
                    palette=HIDDEN,
                ),
            ),
        ),
        Row(
            "p",
            "pause / resume sampling",
            (
                Key(
                    keys="p",
                    action="pause",
                    label="Pause",
                    palette=Offer("Pause / resume", "Stop or restart sampling"),
                ),
            ),
        ),
        Row(
            "+ / -",
            "sample faster / slower",
            (
                Key(
                    keys="plus",
                    action="faster",
                    label="Faster",
                    display="+",
                    palette=Offer("Sample faster", "Shorter refresh interval"),
                ),
                Key(
                    keys="minus",
                    action="slower",
                    label="Slower",
                    display="-",
                    palette=Offer("Sample slower", "Longer refresh interval"),
                ),
            ),
        ),
        Row(
            "Esc",
            "clear the filter",
            (Key(keys="escape", action="clear_filter", label="Clear filter", palette=HIDDEN),),
        ),
        HELP,
        Row("Ctrl+P", "command palette (themes too)"),  # Textual's own binding
        QUIT,
    ),
    bar=(
        "quit",
        "help",
        "sort_next",
        "filter",
        "tree",
        "choose_gpu",
        "pause",
        "zombies",
        "allocator",
        "events",
        "doctor",
        "kill",
    ),
)

# -- the fleet view (FleetApp) ---------------------------------------------------------------------


def _sort(keys: str, by: str, label: str) -> Key:
    return Key(keys=keys, action=f"sort({by!r})", label=label, palette=HIDDEN)


FLEET = KeyTable(
    (
        Row("Enter", "open the host under the cursor: its GPUs, processes, zombies, allocators (Esc: back)"),
        Row(
            "s  F6",
            "sort by the next key: busy, idle, memory, dips, zombies, name (or click a column)",
            (Key(keys="s,f6", action="sort_next", label="Sort", display="s", palette=HIDDEN),),
        ),
        Row(
            "b / i / m",
            "sort: busiest first / idlest first / fullest memory first",
            (_sort("b", "busy", "Busy"), _sort("i", "idle", "Idle"), _sort("m", "memory", "Memory")),
        ),
        Row(
            "d / z / n",
            "sort: most dips / most zombies / by name",
            (_sort("d", "dips", "Dips"), _sort("z", "zombies", "Zombies"), _sort("n", "name", "Name")),
        ),
        Row(
            "r  F5",
            "refresh now (also retries at once after an error)",
            (Key(keys="r,f5", action="refresh", label="Refresh", display="r", palette=HIDDEN),),
        ),
        HELP,
        QUIT,
    ),
    bar=("quit", "help", "sort_next", "sort('busy')", "sort('idle')", "sort('memory')", "refresh"),
)

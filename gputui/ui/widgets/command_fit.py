"""A command line squeezed into the cells it has, keeping the words that tell it apart from its siblings.

Eight ranks run `python -u train.py --config c.yaml --local-rank N --batch-size 16`: cut at its end, every
row reads the same and the rank is what is lost. So the words of a command that some other command of the
same program lacks (`--local-rank 3`, a flag with its value) are kept, the words every sibling shares
drop out from the middle (`…`), and the start of the line fills what is left:
`python -u train.py … --local-rank 3 …`. The whole line stays one key away (→ scrolls, the note under the
table and the detail show it in full). Pure: no Textual, no Rich.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

from gputui import cells

GAP = "…"


def _items(words: list[str]) -> list[tuple[tuple[int, ...], tuple[str, ...]]]:
    """The command's words, a flag and its value as one item (`--local-rank 3`): (indices, words)."""
    out: list[tuple[tuple[int, ...], tuple[str, ...]]] = []
    i = 0
    while i < len(words):
        word = words[i]
        takes_value = word.startswith("-") and "=" not in word and i + 1 < len(words)
        if takes_value and not words[i + 1].startswith("-"):
            out.append(((i, i + 1), (word, words[i + 1])))
            i += 2
        else:
            out.append(((i,), (word,)))
            i += 1
    return out


@lru_cache(maxsize=64)
def telling_words(commands: tuple[str, ...]) -> dict[str, frozenset[int]]:
    """Per command: the indices of its words that no sibling has, a flag with its value (`--local-rank 3`)
    as one. Its siblings: the other commands of the same program and script (its first two items), or
    when it has none of those, of the same program. A command with no sibling at all has none."""
    parsed = {c: _items(c.split(" ")) for c in set(commands)}

    def groups(depth: int) -> dict[tuple[tuple[str, ...], ...], Counter[tuple[str, ...]]]:
        out: dict[tuple[tuple[str, ...], ...], Counter[tuple[str, ...]]] = {}
        for items in parsed.values():  # per group: in how many of its commands each item is
            key = tuple(words for _, words in items[:depth])
            out.setdefault(key, Counter()).update({words for _, words in items})
        return out

    by_script, by_program = groups(2), groups(1)
    out: dict[str, frozenset[int]] = {}
    for c, items in parsed.items():
        count = by_script[tuple(words for _, words in items[:2])]
        if count[items[0][1]] < 2:  # no other command runs this script: its program's commands, then
            count = by_program[(items[0][1],)]
        keep = frozenset(i for indices, words in items if count[words] == 1 for i in indices)
        out[c] = keep if count[items[0][1]] > 1 else frozenset()
    return out


def _render(words: list[str], shown: set[int]) -> str:
    parts: list[str] = []
    for i, word in enumerate(words):
        if i in shown:
            parts.append(word)
        elif not parts or parts[-1] != GAP:
            parts.append(GAP)
    return " ".join(parts)


def _script(words: list[str]) -> int:
    """The index of what the program runs: its first word that is not an option (`train.py`), or the
    module after `-m`; 0 (the program itself) when there is none."""
    for i in range(1, len(words)):
        if words[i - 1] == "-m" or not words[i].startswith("-"):
            return i
    return 0


def squeeze(command: str, keep: Iterable[int], room: int) -> str:
    """`command` in at most `room` cells: its program and script, as many of its telling words (`keep`) as
    fit after them, the start of the line as far as it fits, `…` for each run of words left out. Otherwise
    (it fits as it is, nothing tells it apart, or not one telling word fits beside the script) `command`
    unchanged, for the caller to cut at its end."""
    keep = set(keep)
    if cells.width(command) <= room or not keep - {0}:
        return command
    words = command.split(" ")
    # What the row is (its program and script) first, then as many of the telling words as fit, in order.
    base, telling = {0, _script(words)}, sorted(keep - {0})
    while telling and cells.width(_render(words, base | set(telling))) > room:
        telling.pop()
    shown = base | set(telling)
    if not telling or cells.width(_render(words, shown)) > room:
        return command
    for i in range(1, len(words)):  # the start of the line, word by word, while it fits
        if i in shown:
            continue
        if cells.width(_render(words, shown | {i})) > room:
            break
        shown.add(i)
    return _render(words, shown)

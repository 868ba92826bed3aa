"""The monitor's memory over hours: what it does so that a long watch stays as small as its first minute.

Once the first screen is drawn, `settle` collects and then freezes every object there is (the modules,
the app, its widgets: ~55,000 on an 8-GPU box) into Python's permanent generation, which the cyclic
collector never walks again. So a full collection walks only what was made since, ~0.6 ms instead of
~25, and `tidy` can afford one every few seconds. A full collection is the only thing that empties
Python's free lists (2,000 tuples of each length, and more): without it they, and the garbage that
reached the oldest generation, grew the process by ~0.2 MiB a minute that a bounded tick does not need
(the bench's box, 120x40, 1 Hz: RSS grew 0.5-0.6 MiB a minute before, ~0.35 with these two, while the
analysis windows fill; peak over the first minute 40.2-40.4 MiB before, 39.9 after). From then on the
collector runs on tidy's clock, not on counts of new objects (YOUNG_THRESHOLD).

Only the real program settles: an app under a test must stay collectable after its test (a frozen
object is never collected, even when it becomes garbage), so run_test never freezes anything.
"""

from __future__ import annotations

import gc

SETTLE_S = 2.0  # after the app starts: its first screen is drawn by then
TIDY_S = 2.0  # a full collection of what is not frozen: ~0.6 ms on the box, 0.03 % of a core
# Once settled, the collector runs on tidy's clock rather than on counts of new objects: a tick on the
# box makes ~1,500 that outlive it a while (nearly all then freed by their reference counts, which
# needs no collector), and at Python's default threshold (700) the youngest generation was walked ~2
# times a second, ~0.1 ms each, as much again as tidy. A burst of new objects (a screen opened) still
# starts a collection of its own.
YOUNG_THRESHOLD = 20_000


def settle() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def tidy() -> None:
    gc.collect()

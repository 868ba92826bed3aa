"""units: formatted values fit the columns sized for them."""

from __future__ import annotations

import pytest

from gputui.cells import width
from gputui.units import NA, fmt_bytes, fmt_pct

MIB = 1 << 20


@pytest.mark.parametrize("digits", [0, 1, 2])
def test_every_byte_count_below_1000_tib_fits_the_widest_reading(digits: int) -> None:
    widest = len(f"{999.9:.{digits}f} MiB") if digits else len("999 MiB")
    edges = [0, 1, 999, 1000, 1023, 1024]
    values = {k * 1024**p + d for p in range(5) for k in edges for d in (-1, 0, 1) if k * 1024**p + d >= 0}
    values |= {int(x * MIB) for x in (999.94, 999.95, 999.96, 999.99, 1000, 1010, 1023.9, 1023.99)}
    for n in sorted(v for v in values if v < 999 * 1024**4):
        text = fmt_bytes(n, digits)
        assert width(text) <= widest, (n, text)
        assert not text.startswith("1000"), (n, text)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (999, "999 B"),
        (1000, "1.0 KiB"),
        (999.9 * MIB, "999.9 MiB"),
        (999.96 * MIB, "1.0 GiB"),
        (1000 * MIB, "1.0 GiB"),
        (1010 * MIB, "1.0 GiB"),
        (1023.9 * MIB, "1.0 GiB"),
        (1024 * MIB, "1.0 GiB"),
        (68.7 * 1024 * MIB, "68.7 GiB"),
        (5000 * 1024**4, "5000.0 TiB"),  # the last unit takes what is left
    ],
)
def test_the_unit_changes_at_1000(n: float, text: str) -> None:
    assert fmt_bytes(n) == text


def test_unknown_is_na() -> None:
    assert fmt_bytes(None) == fmt_pct(None) == NA

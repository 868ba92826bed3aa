"""tests/minimum_versions.py, the pins of `make test-min`: what it makes of Requires-Dist lines."""

from __future__ import annotations

import pytest

from tests.minimum_versions import parse, requirements_file, same_version

DECLARED = [
    parse(line)
    for line in (
        "textual<9,>=8.0.0",
        "rich>=14.2.0",
        "nvidia-ml-py>=12.570.86",
        "Prometheus_Client>=0.23.1; extra == 'prometheus'",
        'py-spy>=0.3.14; extra == "pyspy"',
        'pytest>=8; extra == "test"',
        'pytest-textual-snapshot>=1.0; extra == "test"',
        'gputui[prometheus,test]; extra == "dev"',
        'ruff>=0.5; extra == "dev"',
    )
]


def test_every_runtime_dependency_and_the_named_extras_are_pinned_to_their_floor() -> None:
    assert requirements_file(DECLARED, {"prometheus"}) == [
        "textual==8.0.0",
        "rich==14.2.0",
        "nvidia-ml-py==12.570.86",
        "prometheus-client==0.23.1",
        "pytest>=8",  # the test tools as declared: they are not what the floors are about
        "pytest-textual-snapshot>=1.0",
    ]


def test_an_extra_not_asked_for_is_left_out() -> None:
    assert not [
        line for line in requirements_file(DECLARED, set()) if "prometheus" in line or "py-spy" in line
    ]


def test_the_old_parenthesized_form_is_read() -> None:
    requirement = parse("rich (>=12.0.0)")
    assert (requirement.name, requirement.floor, requirement.extra) == ("rich", "12.0.0", None)


def test_a_runtime_dependency_without_a_floor_stops_the_pins() -> None:
    with pytest.raises(SystemExit, match="psutil: no single `>=` floor"):
        requirements_file([parse("psutil")], set())
    with pytest.raises(SystemExit, match="no single `>=` floor"):
        requirements_file([parse("psutil<8")], set())


def test_a_marker_other_than_an_extra_is_refused_not_guessed() -> None:
    with pytest.raises(SystemExit, match="unsupported marker"):
        parse('tomli>=2; python_version < "3.11"')


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [("0.20", "0.20.0", True), ("8.0.0", "8", True), ("5.6.0", "5.6.1", False), ("1.0rc1", "1.0", False)],
)
def test_versions_compare_as_pep_440_releases(a: str, b: str, same: bool) -> None:
    assert same_version(a, b) is same

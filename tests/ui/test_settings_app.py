"""Settings survive a restart: what the user chose in the app is what the next start shows."""

from __future__ import annotations

from pathlib import Path

from gputui import settings
from gputui.ui.app import GpuTuiApp
from tests.ui import world
from tests.ui.conftest import first_frame


def app_on(config: Path, interval: float | None = None) -> GpuTuiApp:
    replay, past = world.sampler(gpus=8)
    app = GpuTuiApp(replay, interval=interval, devices_dir=Path("/nonexistent"), config_path=config)
    for snap in past:
        app.ingest(snap)
    return app


async def test_choices_survive_a_restart(tmp_path: Path) -> None:
    config = tmp_path / "gputui" / "config.toml"
    app = app_on(config)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("s", "t", "right_square_bracket", "v", "plus", "F")
        await pilot.pause()
        chosen = (
            app.view.sort,
            app.view.reverse,
            app.view.tree,
            app.window,
            app.panes.layout_name,
            app.interval,
        )
        folded = app.table.workers_folded
    assert config.exists()
    assert chosen[2] is True and chosen[3] > 300 and chosen[5] != 1.0 and folded is False
    again = app_on(config)
    async with again.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, again)
        restored = (again.view.sort, again.view.reverse, again.view.tree, again.window)
        assert (*restored, again.panes.layout_name, again.interval) == chosen
        assert again.table.workers_folded is False
        assert again.sampler.want_relatives is True


async def test_an_interval_on_the_command_line_is_for_this_run(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    settings.save(settings.Settings(interval=5.0), config)
    app = app_on(config, interval=0.5)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        assert app.interval == 0.5
    assert settings.load(config)[0].interval == 5.0  # not written over: the user did not change it
    assert app_on(config).interval == 5.0


async def test_a_bad_file_is_one_note_and_is_not_written_over(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('interval = "fast"\ntree = true\n')
    app = app_on(config)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        assert app.view.tree is True  # the good key is kept
        assert app.interval == 1.0
        assert any(str(config) in note and "interval" in note for note in app.notes)
        await pilot.press("s")
        await pilot.pause(0.7)
    assert config.read_text() == 'interval = "fast"\ntree = true\n'


async def test_without_a_config_path_nothing_is_read_or_written(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    settings.save(settings.Settings(tree=True), tmp_path / "gputui" / "config.toml")
    replay, _past = world.sampler(gpus=2)
    app = GpuTuiApp(replay, devices_dir=Path("/nonexistent"))
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        assert app.view.tree is False
        await pilot.press("s")
    assert settings.load(tmp_path / "gputui" / "config.toml")[0] == settings.Settings(tree=True)

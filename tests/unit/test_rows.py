"""rows.RowWindow: iterations shorter than logging.every_steps merged into one written row, and the window carried
through a checkpoint."""

import json

import pytest

from rlfoundry.run.rows import RowWindow


def _iteration(loss: float, episodes: int = 0, ret: float | None = None, sps: float = 100.0, **extra) -> dict:
    return {"wall_time": loss * 10, "sps": sps, "sps_run": sps, "train/episode_return": ret,
            "train/episode_length": None if ret is None else 2 * ret, "train/episodes": episodes,
            "train/return_mean": ret, "loss/critic": loss, "time/env": 0.25, "time/learn": 0.5,
            "diag/replay_size": loss * 100, "monitor/alerts": "", **extra}


def test_rows_are_written_every_so_many_steps_with_means_sums_and_pooled_episodes():
    window = RowWindow(every=4, step=0)
    written = [window.add(step, _iteration(float(step), episodes=step % 2, ret=10.0 * step if step % 2 else None,
                                           sps=100.0 * step)) for step in range(1, 9)]
    assert [row is not None for row in written] == [False, False, False, True] * 2
    row = written[3]
    assert row["loss/critic"] == pytest.approx(2.5)  # the mean of 1..4
    assert row["time/env"] == 1.0 and row["time/learn"] == 2.0  # sums
    assert row["train/episodes"] == 2
    assert row["train/episode_return"] == pytest.approx((10 + 30) / 2)  # episodes at steps 1 and 3
    assert row["train/episode_length"] == pytest.approx((20 + 60) / 2)
    assert row["sps"] == pytest.approx(4 / sum(1 / (100 * s) for s in range(1, 5)))  # steps over their time
    assert row["wall_time"] == 40.0 and row["diag/replay_size"] == 400.0  # the latest
    assert row["monitor/alerts"] == ""


def test_an_evaluation_or_the_end_writes_a_row_and_one_iteration_is_written_as_it_came():
    window = RowWindow(every=1000, step=0)
    assert window.add(1, _iteration(1.0)) is None
    evaluated = window.add(2, _iteration(3.0, **{"eval/return_mean": 5.0, "time/eval": 1.5}))
    assert evaluated is not None and evaluated["loss/critic"] == 2.0 and evaluated["eval/return_mean"] == 5.0
    single = _iteration(7.0, episodes=3, ret=1.0 / 3)
    assert window.add(3, single, final=True) == single  # no arithmetic on a row of its own
    assert window.pending() is None
    assert RowWindow(every=0, step=0).add(5, single) == single  # 0: a row per iteration


def test_alerts_of_any_iteration_in_the_row_are_kept():
    window = RowWindow(every=3, step=0)
    window.add(1, _iteration(1.0, **{"monitor/alerts": "loss/critic"}))
    window.add(2, _iteration(1.0, **{"monitor/alerts": "diag/entropy loss/critic"}))
    row = window.add(3, _iteration(1.0))
    assert row is not None and row["monitor/alerts"] == "loss/critic diag/entropy"


def test_a_window_carried_through_json_writes_the_rows_of_an_uninterrupted_one():
    rows = [_iteration(step * 0.1, episodes=step % 3, ret=step * 0.7) for step in range(1, 30)]
    uninterrupted = RowWindow(every=7, step=0)
    expected = [uninterrupted.add(step, row) for step, row in enumerate(rows, start=1)]
    first = RowWindow(every=7, step=0)
    got = [first.add(step, row) for step, row in enumerate(rows[:12], start=1)]
    resumed = RowWindow(every=7, step=12, state=json.loads(json.dumps(first.state)))  # as a checkpoint holds it
    got += [resumed.add(step, row) for step, row in enumerate(rows[12:], start=13)]
    assert got == expected  # equal, not approximately: the sums go on in the same order

"""Records written atomically (config.yaml, summary.json, trials.csv, best.yaml, plots) get the mode a plain open()
would give them under the user's umask, not the 0600 of the temporary file they are renamed from: a group sharing
a cluster's runs folder can read them."""

import os
import stat

import pytest

from rlfoundry.records.rundir import file_mode, write_json, write_yaml
from rlfoundry.records.tables import plot_curves


@pytest.fixture(params=[0o022, 0o007, 0o077])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_writes_follow_the_umask(tmp_path, umask):
    expected = 0o666 & ~umask
    assert file_mode() == expected
    write_json(tmp_path / "summary.json", {"status": "finished"})
    write_yaml(tmp_path / "config.yaml", {"env": {"id": "CartPole-v1"}})
    write_json(tmp_path / "summary.json", {"status": "finished", "again": True})  # replacing keeps it too
    plot_curves([], tmp_path / "curves.png")
    for name in ("summary.json", "config.yaml", "curves.png"):
        assert mode(tmp_path / name) == expected, name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left

"""Checkpoints: round trip, pruning, atomicity under kill -9, and loading that never executes code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from rlfoundry.run import checkpoint as ckpt


def make_checkpoint(value: float = 1.0, size: int = 8) -> ckpt.Checkpoint:
    return ckpt.Checkpoint(
        weights={"policy.w": torch.full((size, size), value), "policy.b": torch.arange(size, dtype=torch.float32)},
        agent={"optimizer": {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(4)}},
                             "param_groups": [{"lr": 1e-3, "params": [0]}]},
               "torch_rng": torch.get_rng_state()},
        arrays={"obs_mean": np.linspace(0, 1, 5)},
        state={"summary": {"total_steps": 10}},
    )


def test_round_trip(tmp_path):
    root = tmp_path / "checkpoints"
    original = make_checkpoint(2.5)
    path = ckpt.save(root, 1024, original, keep_last=3)
    assert ckpt.resolve(tmp_path, "last") == path
    loaded = ckpt.load(path)
    assert loaded.state["step"] == 1024 and loaded.state["summary"] == {"total_steps": 10}
    for key, tensor in original.weights.items():
        assert torch.equal(loaded.weights[key], tensor)
    assert loaded.agent["optimizer"]["param_groups"][0]["lr"] == 1e-3
    assert torch.equal(loaded.agent["optimizer"]["state"][0]["exp_avg"], torch.ones(4))
    assert torch.equal(loaded.agent["torch_rng"], original.agent["torch_rng"])
    np.testing.assert_array_equal(loaded.arrays["obs_mean"], original.arrays["obs_mean"])


def test_a_policy_reads_the_weights_and_named_arrays_only(tmp_path):
    """Loading a trained policy reads neither the optimizers' state (a broken agent.pt does not stop it) nor the
    arrays it does not name, such as a replay of gigabytes."""
    checkpoint = make_checkpoint(1.5)
    checkpoint.arrays["agent.replay.frames"] = np.zeros((4, 3), np.uint8)
    path = ckpt.save(tmp_path, 8, checkpoint, keep_last=1)
    (path / "agent.pt").write_bytes(b"not read")
    loaded = ckpt.load_networks(path, ("obs_mean", "not_there"))
    assert loaded.agent == {} and list(loaded.arrays) == ["obs_mean"] and loaded.state["step"] == 8
    assert torch.equal(loaded.weights["policy.w"], checkpoint.weights["policy.w"])
    with pytest.raises(ckpt.CheckpointError, match="agent.pt"):
        ckpt.load(path)


def test_weights_that_share_storage_are_saved(tmp_path):
    flat = torch.arange(6, dtype=torch.float32)
    checkpoint = make_checkpoint()
    checkpoint.weights = {"policy.a": flat[:3].view(3), "policy.b": flat[3:].view(3)}  # views, as FlatOptimizer makes
    loaded = ckpt.load(ckpt.save(tmp_path, 1, checkpoint, keep_last=1))
    assert torch.equal(loaded.weights["policy.b"], torch.tensor([3.0, 4.0, 5.0]))


def test_keep_last_never_deletes_best_or_last(tmp_path):
    ckpt.save(tmp_path, 100, make_checkpoint(), keep_last=2, best_return=9.0)
    for step in (200, 300, 400, 500):
        ckpt.save(tmp_path, step, make_checkpoint(), keep_last=2)
    kept = sorted(p.name for p in tmp_path.glob("step_*"))
    assert kept == [ckpt.step_dir_name(s) for s in (100, 400, 500)]
    best = json.loads((tmp_path / "best.json").read_text())
    assert best["step"] == 100 and best["eval_return"] == 9.0


@pytest.fixture
def saved(tmp_path) -> Path:
    return ckpt.save(tmp_path / "checkpoints", 64, make_checkpoint(), keep_last=1)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


BROKEN = {
    "truncated weights": lambda p: _truncate(p / "weights.safetensors"),
    "garbage weights": lambda p: (p / "weights.safetensors").write_bytes(b"\x00" * 64),
    "truncated agent": lambda p: _truncate(p / "agent.pt"),
    "truncated arrays": lambda p: _truncate(p / "arrays.npz"),
    "missing file": lambda p: (p / "agent.pt").unlink(),
    "foreign state": lambda p: (p / "state.json").write_text(json.dumps({"step": 64})),
    "malformed state": lambda p: (p / "state.json").write_text("{not json"),
    "future version": lambda p: (p / "state.json").write_text(json.dumps({"format": ckpt.FORMAT, "version": 99})),
}


@pytest.mark.parametrize("damage", list(BROKEN))
def test_broken_checkpoints_give_a_clear_error(saved, damage):
    BROKEN[damage](saved)
    with pytest.raises(ckpt.CheckpointError) as err:
        ckpt.load(saved)
    assert str(saved) in str(err.value)


def test_missing_checkpoints_give_a_clear_error(tmp_path):
    with pytest.raises(ckpt.CheckpointError, match="no checkpoints/ directory"):
        ckpt.resolve(tmp_path, "last")
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(ckpt.CheckpointError, match="no 'best' checkpoint"):
        ckpt.resolve(tmp_path, "best")


class _Payload:
    """Pickles to a call of os.system: what a malicious checkpoint would carry."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_payload_is_refused_not_executed(saved, tmp_path):
    marker = tmp_path / "pwned"
    torch.save({"optimizer": _Payload(marker)}, saved / "agent.pt")
    with pytest.raises(ckpt.CheckpointError, match="refused or corrupt"):
        ckpt.load(saved)
    assert not marker.exists()
    # and numpy object arrays (pickled inside .npz) are refused too
    np.savez(saved / "arrays.npz", evil=np.array([_Payload(marker)], dtype=object))
    torch.save({"optimizer": {}}, saved / "agent.pt")
    with pytest.raises(ckpt.CheckpointError, match="arrays.npz"):
        ckpt.load(saved)
    assert not marker.exists()


WRITER = textwrap.dedent("""
    import sys, torch
    from pathlib import Path
    from rlfoundry.run import checkpoint as ckpt
    root = Path(sys.argv[1])
    step = int(ckpt.load(ckpt.resolve(root.parent)).state["step"]) if (root / "last.json").exists() else 0
    while True:  # large weights so that a save takes a while and the kill lands inside one
        step += 1
        c = ckpt.Checkpoint(weights={"w": torch.full((1024, 1024), float(step))}, agent={"step": step},
                            state={"value": step})
        ckpt.save(root, step, c, keep_last=2)
        print(step, flush=True)
""")


def test_kill_9_during_saves_leaves_the_last_checkpoint_loadable(tmp_path):
    """A real writer process saving 4 MB checkpoints back to back, killed with SIGKILL at several moments."""
    root = tmp_path / "checkpoints"
    for delay in (0.013, 0.1, 0.237):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip().isdigit()  # torch imported, one save done: now kill it mid-loop
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        last = ckpt.load(ckpt.resolve(tmp_path, "last"))
        assert torch.all(last.weights["w"] == float(last.state["value"]))
        for step_dir in root.glob("step_*"):  # every checkpoint that got its name is complete
            loaded = ckpt.load(step_dir)
            assert torch.all(loaded.weights["w"] == float(loaded.state["value"]))

"""W&B logging (`rlfoundry.sinks.wandb`): a short run with no API key is written offline into the run directory and
read back from its .wandb file (metrics, config, video, summary); `--resume` continues the same W&B run without
logging a step twice; a W&B sweep agent's parameters become validated overrides; the workspace `rlfoundry
wandb-dashboard` saves, W&B's API patched; and wandb not installed is bad input. Nothing here reaches a network."""

from __future__ import annotations

import csv
import json
import struct
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rlfoundry
from rlfoundry.cli import app
from rlfoundry.config.errors import ConfigError
from rlfoundry.experiment.load import load_config
from rlfoundry.run.launch import _with_sweep
from rlfoundry.sinks.wandb import ID_FILE, sweep_overrides

wandb = pytest.importorskip("wandb")
workspaces = pytest.importorskip("wandb_workspaces.workspaces")
from wandb.proto import wandb_internal_pb2 as pb  # noqa: E402
from wandb.sdk.lib.config_util import save_config_file_from_dict  # noqa: E402  (what `wandb agent` writes)

from rlfoundry.sinks import wandb_dashboard  # noqa: E402

TINY = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "train.total_timesteps=1024",
        "env.num_envs=4", "algo.num_steps=64", "eval.every_steps=0", "eval.episodes=2", "checkpoint.every_steps=0"]
STOP, LOGGED_BEFORE = 512, 768  # the first run stops at 512; its W&B run is said to have logged up to 768
NOT_HERE = ("WANDB_API_KEY", "WANDB_MODE", "WANDB_SWEEP_ID", "WANDB_SWEEP_PARAM_PATH", "WANDB_RUN_ID",
            "WANDB_IDENTITY_TOKEN_FILE", "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_DIR")


def no_credentials(patch: pytest.MonkeyPatch, home: Path) -> None:
    """No API key anywhere wandb looks: environment, ~/.netrc, wandb's settings file."""
    for name in NOT_HERE:
        patch.delenv(name, raising=False)
    patch.setenv("HOME", str(home))
    patch.setenv("NETRC", str(home / ".netrc"))
    patch.setenv("WANDB_CONFIG_DIR", str(home / "wandb-config"))


def records(path: Path):
    """The protobuf records of a .wandb file: a 7-byte header, then LevelDB's log format (32 KiB blocks of
    chunks, each with a 7-byte header: crc32c, little-endian length, type 1 full / 2 first / 3 middle / 4 last)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    position, pending = 7, b""
    while position + 7 <= len(data):
        left = 32768 - position % 32768
        if left < 7:  # a block's tail too short for a header is padding
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if kind == 0:
            break
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def read_offline_run(directory: Path) -> dict:
    """What an offline run directory (wandb/offline-run-*) holds: run id, group, tags, config, history rows by step
    (in the order logged), the summary's last values."""
    (path,) = directory.glob("run-*.wandb")
    run, config, history, summary = None, {}, [], {}
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
            config.update({item.key: json.loads(item.value_json) for item in run.config.update})
        elif kind == "config":
            config.update({item.key: json.loads(item.value_json) for item in record.config.update})
        elif kind == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            history.append(row)
        elif kind == "summary":
            summary.update({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.summary.update})
    return {"id": run.run_id, "name": run.display_name, "notes": run.notes, "group": run.run_group,
            "tags": list(run.tags), "config": config, "history": history, "summary": summary}


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """A run with logging.wandb that stops at step 512, then its resume to the end (with a video of the final
    evaluation); its wandb.json claims steps up to 768 were logged, as after a failure past the checkpoint."""
    home = tmp_path_factory.mktemp("home")
    run_dir = tmp_path_factory.mktemp("wandb") / "run"
    overrides = [*TINY, "logging.wandb=true", "logging.wandb_tags=[tiny,ppo]", "logging.group=g1", "eval.video=true"]
    with pytest.MonkeyPatch.context() as patch:
        no_credentials(patch, home)
        try:
            _, stopped = rlfoundry.train("CartPole-v1:ppo", overrides, run_dir, stop_at_step=STOP)
            first = json.loads((run_dir / ID_FILE).read_text())
            (run_dir / ID_FILE).write_text(json.dumps({**first, "last_step": LOGGED_BEFORE}))
            _, summary = rlfoundry.train(resume=run_dir)
        finally:
            wandb.teardown()  # wandb's service process ends with these runs, not with the test worker
    return run_dir, stopped, first, summary


@pytest.mark.xdist_group("wandb")  # one worker trains the module's runs once for both tests
def test_an_offline_run_holds_the_metrics_config_video_and_summary(resumed):
    run_dir, stopped, first, summary = resumed
    assert stopped["status"] == "stopped" and first["last_step"] == STOP
    attempts = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(attempts) == 2  # the stopped run, then its resume: both offline, inside the run directory
    before, after = (read_offline_run(path) for path in attempts)
    assert before["id"] == after["id"] == first["id"]  # resume continued the same W&B run
    assert before["group"] == "g1" and before["tags"] == ["tiny", "ppo"] and before["name"] == "CartPole-v1:ppo s1"
    assert str(run_dir) in before["notes"]
    assert before["config"]["env"]["id"] == "CartPole-v1" and before["config"]["algo"]["name"] == "ppo"
    assert before["config"]["logging"]["wandb"] is True and before["config"]["provenance"]["versions"]

    steps = [row["_step"] for row in before["history"]]
    assert steps == list(range(256, STOP + 1, 256))  # 4 envs × 64 steps per iteration
    # the resumed run logs only past what the W&B run already has, in increasing steps
    assert [row["_step"] for row in after["history"]] == [1024]
    with (run_dir / "metrics.csv").open(newline="") as f:
        rows = {int(row["global_step"]): row for row in csv.DictReader(f)}
    final = after["history"][-1]
    logged = {key for key, value in rows[1024].items() if value not in ("", None) and key != "global_step"}
    numeric = {key for key in logged if key.split("/")[0] != "monitor"}
    assert numeric <= set(final), numeric - set(final)  # the metrics TensorBoard and the CSV get
    assert final["eval/return_mean"] == pytest.approx(float(rows[1024]["eval/return_mean"]))
    assert final["eval/video/_type"] == "video-file"
    assert (attempts[1] / "files" / final["eval/video/path"]).stat().st_size > 0

    assert after["summary"]["summary/status"] == "finished"
    assert after["summary"]["summary/eval_return_mean"] == pytest.approx(summary["eval_return_mean"])
    assert after["summary"]["summary/total_steps"] == 1024
    assert json.loads((run_dir / ID_FILE).read_text()) == {"id": first["id"], "last_step": 1024}
    assert "offline (no W&B API key is configured)" in (run_dir / "run.log").read_text()


@pytest.mark.xdist_group("wandb")
def test_the_dashboard_shows_every_metric_a_run_logs(resumed):
    run_dir = resumed[0]
    with (run_dir / "metrics.csv").open(newline="") as f:
        columns = next(csv.reader(f))
    shown = {key for _, keys in wandb_dashboard.SECTIONS for key in keys}
    metrics = {c for c in columns if c.startswith(("train/", "eval/", "loss/", "diag/", "time/", "sps"))}
    assert metrics <= shown, metrics - shown


def write_sweep(tmp_path, monkeypatch, params: dict) -> None:
    """What `wandb agent` does before it starts a run's command."""
    path = tmp_path / "sweep" / "config-run1.yaml"
    save_config_file_from_dict(str(path), {key: {"value": value} for key, value in params.items()})
    monkeypatch.setenv("WANDB_SWEEP_ID", "swp123")
    monkeypatch.setenv("WANDB_SWEEP_PARAM_PATH", str(path))


def test_sweep_parameters_are_overrides(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_SWEEP_ID", raising=False)
    assert sweep_overrides() == []
    write_sweep(tmp_path, monkeypatch, {"algo.lr": 1e-5, "algo.update_epochs": 3, "env": {"num_envs": 16},
                                        "logging.wandb_tags": ["x"]})
    assert sweep_overrides() == ["logging.wandb=true", "algo.lr=1.0e-05", "algo.update_epochs=3", "env.num_envs=16",
                                 "logging.wandb_tags=[x]"]
    cfg = _with_sweep("CartPole-v1:ppo", ["algo.update_epochs=9", "train.seed=4"])
    assert cfg.algo.lr.start == pytest.approx(1e-5) and cfg.env.num_envs == 16 and cfg.logging.wandb_tags == ["x"]
    assert cfg.algo.update_epochs == 3 and cfg.train.seed == 4  # the sweep's value wins over the command line's
    assert cfg.logging.wandb is True
    given = load_config("CartPole-v1:ppo", ["train.seed=4"])  # `rlfoundry.train(cfg)` under an agent's function
    merged = _with_sweep(given, None)
    assert merged.algo.update_epochs == 3 and merged.train.seed == 4 and merged.solved == given.solved
    merged = _with_sweep(given, ["train.seed=6", "algo.update_epochs=9"])  # `rlfoundry.train(cfg, overrides)`
    assert merged.algo.update_epochs == 3 and merged.train.seed == 6


@pytest.mark.parametrize("params, named", [({"algo.update_epochs": "many"}, "algo.update_epochs"),
                                           ({"algo.nope": 1}, "nope"), ({"optimizer.lr": 1}, "optimizer")])
def test_a_bad_sweep_parameter_is_a_config_error(tmp_path, monkeypatch, params, named):
    write_sweep(tmp_path, monkeypatch, params)
    with pytest.raises(ConfigError, match=f"{named}.*W&B sweep swp123") as error:
        rlfoundry.train("CartPole-v1:ppo", ["logging.progress=false"], tmp_path / "run")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "run").exists()  # nothing created


def test_a_sweep_without_its_parameter_file(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SWEEP_ID", "swp123")
    monkeypatch.delenv("WANDB_SWEEP_PARAM_PATH", raising=False)
    with pytest.raises(ConfigError, match="WANDB_SWEEP_PARAM_PATH"):
        sweep_overrides()
    monkeypatch.setenv("WANDB_SWEEP_PARAM_PATH", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="cannot read its parameters"):
        sweep_overrides()


class FakeApi:
    created: list = []

    def create_project(self, project, entity):
        self.created.append((entity, project))


@pytest.fixture
def patched_api(monkeypatch):
    """W&B's API replaced: logged in, the project's saved workspaces from `views`, saves recorded."""
    saved, views = [], {"value": None}
    FakeApi.created = []

    def save(self):
        saved.append(self)
        return self

    monkeypatch.setattr(wandb_dashboard, "require_login", lambda wandb: None)
    monkeypatch.setattr(wandb_dashboard, "existing_views", lambda wandb, entity, project: views["value"])
    monkeypatch.setattr(wandb, "Api", FakeApi)
    monkeypatch.setattr(workspaces.Workspace, "save", save)
    monkeypatch.setattr(workspaces.Workspace, "url", property(lambda self: f"https://wandb.test/{self.entity}"))
    return saved, views


def test_the_dashboard_command_saves_the_workspace(patched_api):
    saved, views = patched_api
    result = CliRunner().invoke(app, ["wandb-dashboard", "--entity", "team", "--project", "rl"])
    assert result.exit_code == 0, result.output
    assert "saved: https://wandb.test/team" in result.output
    assert FakeApi.created == [("team", "rl")]  # the project did not exist yet
    (workspace,) = saved
    assert (workspace.entity, workspace.project, workspace.name) == ("team", "rl", "rlfoundry")
    sections = {section.name: section.panels for section in workspace.sections}
    assert list(sections) == ["returns", "losses", "diagnostics", "speed", "videos"]
    keys = {name: [key for panel in panels for key in getattr(panel, "y", [])] for name, panels in sections.items()}
    assert keys["returns"][:2] == ["eval/return_mean", "train/return_mean"]
    assert {"loss/policy", "loss/value", "loss/entropy", "loss/q", "loss/actor", "loss/critic"} <= set(keys["losses"])
    assert {"diag/approx_kl", "diag/clipfrac", "diag/explained_variance", "diag/q_mean"} <= set(keys["diagnostics"])
    assert keys["speed"][:2] == ["sps_run", "sps"] and "time/learn" in keys["speed"]
    assert all(key.startswith(prefix) for name, prefix in (("losses", "loss/"), ("diagnostics", "diag/"))
               for key in keys[name])
    assert all(panel.x == "Step" and panel.title == panel.y[0] for name in ("returns", "losses")
               for panel in sections[name])
    (videos,) = sections["videos"]
    assert type(videos).__name__ == "MediaBrowser" and videos.media_keys == ["eval/video"]
    assert workspace._to_model().spec  # W&B's own serialisation accepts it


def test_the_dashboard_replaces_an_existing_workspace_only_when_told(patched_api):
    saved, views = patched_api
    views["value"] = {"mine": {"id": "VmlldzoxMjM=", "name": "nw-abc-v", "displayName": "mine"}}
    args = ["wandb-dashboard", "--entity", "team", "--project", "rl", "--name", "mine"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and not saved
    assert "already has a workspace named 'mine'" in result.stderr and "--overwrite" in result.stderr
    result = CliRunner().invoke(app, [*args, "--overwrite"])
    assert result.exit_code == 0, result.output
    (workspace,) = saved
    assert (workspace._internal_name, workspace._internal_id) == ("nw-abc-v", "VmlldzoxMjM=")  # the same view
    assert FakeApi.created == []


def test_without_wandb_installed(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    result = CliRunner().invoke(app, ["train", "CartPole-v1:ppo", "logging.wandb=true", "logging.progress=false",
                                      "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert "logging.wandb = true needs the wandb package" in result.stderr
    assert "pip install 'rlfoundry[wandb]'" in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()
    result = CliRunner().invoke(app, ["wandb-dashboard", "--entity", "team", "--project", "rl"])
    assert result.exit_code == 2 and "pip install 'rlfoundry[wandb]'" in result.stderr


def test_overrides_apply_to_a_given_config_outside_a_sweep(monkeypatch):
    monkeypatch.delenv("WANDB_SWEEP_ID", raising=False)
    given = load_config("CartPole-v1:ppo", ["train.seed=4"])
    assert _with_sweep(given, ["train.seed=9"]).train.seed == 9 and _with_sweep(given, None) is given

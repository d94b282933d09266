"""Fine-tuning (`train SPEC --init RUN`, `train.init`; the zoo's `-i`, Stable-Baselines3's load-then-learn): a new
run starts from another run's networks and observation statistics, with fresh optimizers and step count; its
config.yaml pins what it started from and its provenance records the weights' hash; a resumed fine-tuned run does
not read the source again; a source that does not fit is refused before anything is created."""

import hashlib
import json
import shutil

import pytest
import yaml
from typer.testing import CliRunner

import rlfoundry
from rlfoundry.cli import app
from rlfoundry.config.errors import ConfigError
from rlfoundry.run import checkpoint as ckpt
from rlfoundry.studies.verify import verify

QUIET = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "train.torch_threads=1"]
FROZEN = "algo.lr=1e-12"  # an optimizer step that changes nothing: the run acts with the networks it started from


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    """A CartPole PPO run that solves (500) within 10,240 steps; it stops at the threshold."""
    root = tmp_path_factory.mktemp("init")
    run_dir, summary = rlfoundry.train("CartPole-v1:ppo", [*QUIET, f"logging.runs_root={root}",
                                                           "train.total_timesteps=20000"], root / "source")
    assert summary["eval_return_mean"] == 500.0
    return run_dir


def short(root, *extra):
    return [*QUIET, f"logging.runs_root={root}", "train.total_timesteps=2048", "eval.every_steps=0", *extra]


def test_a_run_starts_from_another_runs_networks(solved, tmp_path):
    _, fresh = rlfoundry.train("CartPole-v1:ppo", short(tmp_path, FROZEN), tmp_path / "fresh")
    run_dir, tuned = rlfoundry.train("CartPole-v1:ppo", short(tmp_path, FROZEN, f"train.init={solved}"),
                                     tmp_path / "tuned")
    assert fresh["eval_return_mean"] < 200 and tuned["eval_return_mean"] == 500.0
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    best = ckpt.resolve(solved, "best")
    assert config["train"]["init"] == str(solved.resolve())  # pinned: absolute, and the step directory of `best`
    assert config["train"]["init_checkpoint"] == best.name
    record = config["provenance"]["init"]
    digest = hashlib.sha256((best / "weights.safetensors").read_bytes()).hexdigest()
    assert record == {"source": str(solved.resolve()), "checkpoint": best.name, "step": int(best.name[5:]),
                      "sha256": digest}
    # fresh optimizers and step count: the schedules and counters start at 0
    assert json.loads((run_dir / "summary.json").read_text())["total_steps"] == 2048


def test_a_fine_tuned_run_verifies_from_its_pinned_source(solved, tmp_path):
    run_dir, _ = rlfoundry.train("CartPole-v1:ppo", short(tmp_path, f"train.init={solved}", "eval.every_steps=1024"),
                                 tmp_path / "tuned")
    result = verify(run_dir, runs_root=tmp_path)
    assert result.reproduced and result.rows >= 2 and not result.provenance


def test_observation_statistics_come_along(tmp_path):
    normalised = ["env.normalize_obs=true", "algo.num_steps=128", "algo.minibatch_size=256", "algo.update_epochs=1"]
    source, _ = rlfoundry.train("Pendulum-v1:ppo", short(tmp_path, *normalised, "train.total_timesteps=1024"),
                                tmp_path / "source")
    run_dir, _ = rlfoundry.train("Pendulum-v1:ppo", short(tmp_path, *normalised, f"train.init={source}",
                                                          "train.total_timesteps=1024"), tmp_path / "tuned")
    before, after = (ckpt.load(ckpt.resolve(path, "last")) for path in (source, run_dir))
    # the running count goes on from the source's: the same budget again adds as many observations as it counted
    count = before.state["obs_rms_count"]
    assert count > 1024 and after.state["obs_rms_count"] == pytest.approx(2 * count, abs=1e-3)
    with pytest.raises(ConfigError, match="set env.normalize_obs=true"):
        rlfoundry.train("Pendulum-v1:ppo", short(tmp_path, *normalised, "env.normalize_obs=false",
                                                 f"train.init={source}"), tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def test_a_resumed_fine_tuned_run_does_not_read_its_source_again(solved, tmp_path):
    source = tmp_path / "copy"
    shutil.copytree(solved, source)
    run_dir, summary = rlfoundry.train("CartPole-v1:ppo", short(tmp_path, f"train.init={source}",
                                                                "checkpoint.every_steps=1024"),
                                       tmp_path / "tuned", stop_at_step=1024)
    assert summary["status"] == "stopped"
    shutil.rmtree(source)  # gone: a resume that read it again would fail
    _, resumed = rlfoundry.train(resume=run_dir)
    assert resumed["status"] == "finished" and resumed["total_steps"] == 2048


@pytest.mark.parametrize("case, extra, message", [
    ("missing", ["train.init=nowhere"], "train.init: nowhere: no such run directory"),
    ("another algorithm", ["train.init={dqn}"], "do not fit the run's networks"),
    ("another network", ["train.init={source}", "network.hidden_sizes=[32, 32]"], "do not fit the run's networks"),
    ("a bad checkpoint", ["train.init={source}", "train.init_checkpoint=999"], "step_000000000999"),
])
def test_a_source_that_does_not_fit_is_refused_before_anything_is_created(solved, tmp_path, case, extra, message):
    dqn = tmp_path / "dqn"
    if case == "another algorithm":
        rlfoundry.train("CartPole-v1:dqn", short(tmp_path, "train.total_timesteps=256", "algo.learning_starts=128"), dqn)
    extra = [item.format(source=solved, dqn=dqn) for item in extra]
    with pytest.raises(ConfigError, match=message):
        rlfoundry.train("CartPole-v1:ppo", short(tmp_path, *extra), tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def test_cli_init_and_its_refusals(solved, tmp_path):
    runner = CliRunner()
    root = f"logging.runs_root={tmp_path}"
    ok = runner.invoke(app, ["train", "CartPole-v1:ppo", "--init", str(solved), "--init-checkpoint", "best",
                             "--total-timesteps", "1024", "--run-dir", str(tmp_path / "tuned"), *QUIET, root])
    assert ok.exit_code == 0, ok.output
    chosen = yaml.safe_load((tmp_path / "tuned" / "config.yaml").read_text())["provenance"]["init"]["checkpoint"]
    assert chosen == ckpt.resolve(solved, "best").name
    last = runner.invoke(app, ["train", "CartPole-v1:ppo", "--init", "@last", "--total-timesteps", "512",
                               "--run-dir", str(tmp_path / "from-last"), *QUIET, root])
    assert last.exit_code == 0, last.output  # @last: the newest run under the runs root, the one just trained
    assert yaml.safe_load((tmp_path / "from-last" / "config.yaml").read_text())["train"]["init"] == \
        str((tmp_path / "tuned").resolve())
    both = runner.invoke(app, ["train", "--resume", str(tmp_path / "tuned"), "--init", str(solved)])
    assert both.exit_code == 2 and "--init starts a new run" in both.output

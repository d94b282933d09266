"""`rlfoundry eval RUN_DIR` on a real tiny run: the printed return, --checkpoint, --video files, and unusable
run directories that exit 2 with one error line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import imageio.v2 as imageio
import pytest
import typer
from typer.testing import CliRunner

import rlfoundry
from rlfoundry.cli.eval import evaluate_run
from rlfoundry.config.errors import ConfigError
from rlfoundry.experiment.load import load_config

TINY = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "train.total_timesteps=2048",
        "eval.every_steps=1024", "eval.episodes=2"]

app = typer.Typer(pretty_exceptions_enable=False)
app.command("eval")(evaluate_run)
app.command("other")(lambda: None)  # a second command, so `eval` is a subcommand as in the real app


def invoke(*args: str):
    return CliRunner().invoke(app, ["eval", *map(str, args)])


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One real CartPole run, shared; tests that write or break files work on a copy."""
    run_dir, _ = rlfoundry.train("CartPole-v1:ppo", TINY, tmp_path_factory.mktemp("eval") / "run")
    return run_dir


@pytest.fixture
def copy(trained, tmp_path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run"))


def test_eval_prints_mean_and_std_of_the_last_checkpoint(trained):
    result = invoke(trained, "--episodes", 3)
    assert result.exit_code == 0, result.output
    line = result.stdout.strip()
    assert line.startswith("evaluation return: ") and "±" in line
    assert line.endswith("over 3 episodes (checkpoint last, step 2,048)")
    assert result.stderr == ""
    assert invoke(trained, "--episodes", 3).stdout == result.stdout  # same seed: the same episodes
    assert not (trained / "videos").exists()


def test_eval_of_the_best_checkpoint_with_options(trained):
    best_step = json.loads((trained / "checkpoints" / "best.json").read_text())["step"]
    args = ("--checkpoint", "best", "--episodes", 2, "--seed", 5, "--num-envs", 1, "--stochastic")
    result = invoke(trained, *args)
    assert result.exit_code == 0, result.output
    assert f"over 2 episodes (checkpoint best, step {best_step:,})" in result.stdout
    assert invoke(trained, *args).stdout == result.stdout  # sampled actions are seeded too


def test_eval_video_writes_up_to_three_mp4s(copy):
    result = invoke(copy, "--episodes", 4, "--video")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert "over 4 episodes" in lines[0]
    names = [f"eval_last_step2048_ep{i}.mp4" for i in range(3)]
    assert sorted(p.name for p in (copy / "videos").iterdir()) == names
    for line, name in zip(lines[1:], names, strict=True):
        assert line.startswith(f"video: {copy / 'videos' / name} (return ")
        steps = int(line.split(", ")[-1].split()[0])
        with imageio.get_reader(copy / "videos" / name, format="FFMPEG") as reader:
            assert sum(1 for _ in reader) == steps + 1


def _no_checkpoints(run: Path) -> None:
    shutil.rmtree(run / "checkpoints")


def _corrupt_weights(run: Path) -> None:
    step_dir = json.loads((run / "checkpoints" / "last.json").read_text())["step_dir"]
    (run / "checkpoints" / step_dir / "weights.safetensors").write_bytes(b"\x00garbage" * 10)


ERRORS = {
    "missing run dir": (lambda run: shutil.rmtree(run), [], "no such run directory or model folder"),
    "no checkpoints": (_no_checkpoints, [], "no checkpoints/ directory"),
    "unknown checkpoint": (None, ["--checkpoint", "nope"], "nope: checkpoint directory not found"),
    "checkpoint outside the run": (None, ["--checkpoint", "../run"], "--checkpoint '../run': allowed: last, best"),
    "corrupt weights": (_corrupt_weights, [], "weights.safetensors: corrupt or truncated"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_unusable_input_exits_2_with_one_error_line(copy, case):
    setup, args, message = ERRORS[case]
    if setup is not None:
        setup(copy)
    result = invoke(copy, *args, "--video")
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stdout == "" and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert not (copy / "videos").exists()


def test_episodes_must_be_positive(trained):
    result = invoke(trained, "--episodes", 0)
    assert result.exit_code == 2 and "--episodes" in result.output


@pytest.mark.parametrize("seed", ["-5", "99999999999999999999999"])
def test_a_seed_outside_what_numpy_takes_exits_2(trained, seed):
    """eval and play take the seeds train.seed takes, 0 to 2**32 - 1 (NumPy's global seed); beyond, one usage
    error, not a traceback."""
    from rlfoundry.cli.play import play

    cli = typer.Typer(pretty_exceptions_enable=False)
    cli.command("play")(play)
    cli.command("other")(lambda: None)
    for result in (invoke(trained, "--seed", seed), CliRunner().invoke(cli, ["play", str(trained), "--seed", seed])):
        assert result.exit_code == 2 and "--seed" in result.output, result.output
    with pytest.raises(ConfigError, match="train.seed"):  # and train refuses them as a config error
        load_config("CartPole-v1:ppo", [f"train.seed={seed}"])


def test_eval_video_of_an_atari_run(tmp_path):
    """ALE ids train on the vector backend by default, which does not render: videos (during training and from
    `rlfoundry eval --video`) are played on the single backend, one whole game each (all five lives)."""
    pytest.importorskip("ale_py")
    overrides = [*TINY, "train.total_timesteps=64", "env.num_envs=2", "algo.num_steps=32", "algo.minibatch_size=32",
                 "eval.every_steps=0", "eval.episodes=1", "eval.video=true", "eval.stop_at_threshold=false",
                 "env.atari.max_episode_frames=4000"]
    run_dir, _ = rlfoundry.train("ALE/Breakout-v5:ppo", overrides, tmp_path / "run")
    assert (run_dir / "videos" / "eval_step64.mp4").stat().st_size > 0
    result = invoke(run_dir, "--episodes", 1, "--video")
    assert result.exit_code == 0, result.output
    line = result.stdout.strip().splitlines()[1]
    path = run_dir / "videos" / "eval_last_step64_ep0.mp4"
    assert line.startswith(f"video: {path} (return ")
    steps = int(line.split(", ")[-1].split()[0])
    with imageio.get_reader(path, format="FFMPEG") as reader:
        shapes = [frame.shape for frame in reader]
    assert len(shapes) == steps + 1 and set(shapes) == {(210, 160, 3)}


def test_evaluate_in_python_gives_the_numbers_eval_prints(trained):
    """rlfoundry.evaluate: SB3's evaluate_policy for a RUN or a loaded policy, the same episodes `eval` plays."""
    result = rlfoundry.evaluate(trained, episodes=3)
    printed = invoke(trained, "--episodes", 3).stdout
    assert f"{result.mean:.2f} ± {result.std:.2f} over 3 episodes (checkpoint last, step 2,048)" in printed
    assert len(result.returns) == len(result.lengths) == 3 and result.env_id == "CartPole-v1"
    assert rlfoundry.evaluate(rlfoundry.load_policy(trained, "last"), episodes=3).returns == result.returns
    other = rlfoundry.evaluate(trained, "CartPole-v0", episodes=2, seed=4, checkpoint="best")
    assert (other.env_id, other.seed, other.checkpoint) == ("CartPole-v0", 4, "best") and max(other.lengths) <= 200
    for bad in ({"episodes": 0}, {"seed": -1}, {"num_envs": 0}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            rlfoundry.evaluate(trained, **bad)

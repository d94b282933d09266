"""The policy API (`rlfoundry.load_policy`), `rlfoundry play` and `rlfoundry export`: the documented example runs, `act`
normalises as the evaluation envs do and carries memory as `evaluate` does, play writes videos and prints returns,
and the exported ONNX and TorchScript files give `policy.act`'s actions for an MLP, a CNN, an LSTM and SAC's actor."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest
import torch
import typer
from typer.testing import CliRunner

import rlfoundry
from rlfoundry import envs as envs_lib
from rlfoundry.algos import Runtime, algorithm
from rlfoundry.algos.base import Memory
from rlfoundry.cli.export import export as export_command
from rlfoundry.cli.play import play as play_command
from rlfoundry.experiment.load import load_config
from rlfoundry.trained.export import export
from rlfoundry.trained.policy import Policy

ROOT = Path(__file__).resolve().parents[2]
TINY = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "eval.episodes=1",
        "eval.every_steps=0", "eval.stop_at_threshold=false"]

app = typer.Typer(pretty_exceptions_enable=False)
app.command("play")(play_command)
app.command("export")(export_command)


def invoke(*args):
    return CliRunner().invoke(app, [str(arg) for arg in args])


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory) -> Path:
    """A tiny CartPole PPO run with running observation normalisation."""
    overrides = [*TINY, "train.total_timesteps=2048", "env.normalize_obs=true"]
    run_dir, _ = rlfoundry.train("CartPole-v1:ppo", overrides, tmp_path_factory.mktemp("api") / "run")
    return run_dir


def fresh_policy(spec: str, overrides: list[str], obs_stats=None) -> Policy:
    """An untrained agent of a config as a Policy (export's numbers do not depend on training), in fp32."""
    cfg = load_config(spec, [*TINY, "train.precision=fp32", *overrides])
    envs, env_spec = envs_lib.build(cfg.env, 1, evaluation=True)
    envs.close()
    agent = algorithm(cfg.algo.name)(cfg, env_spec, Runtime.of(cfg.train))
    return Policy(cfg, agent, env_spec, obs_stats, 0, spec)


@pytest.mark.parametrize("page", ["README.md", "docs/guide/trained-agents.md"])
def test_the_documented_example_runs(page, cartpole, tmp_path, monkeypatch, capsys):
    """The README's quick start and the Trained agents page show the same example, and it runs."""
    text = (ROOT / page).read_text()
    block = re.search(r"<!-- policy-example: .*? -->\n```python\n(.*?)```", text, re.S).group(1)
    assert len(block.strip().splitlines()) <= 12
    shutil.copytree(cartpole, tmp_path / "runs" / cartpole.name)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, page, "exec"), {})
    assert re.fullmatch(r"return \d+\.0\n", capsys.readouterr().out)


def test_act_normalises_as_the_evaluation_envs_do(cartpole):
    policy = rlfoundry.load_policy(cartpole, checkpoint="last")
    assert policy.obs_stats is not None and policy.step == 2048
    env, envs = policy.make_env(), policy.vector_env(1)
    raw, _ = env.reset(seed=7)
    normalised, _ = envs.reset(seed=7)
    for _ in range(50):
        np.testing.assert_array_equal(policy.normalize(raw[None]), normalised)
        action, state = policy.act(raw)
        assert state is None and np.ndim(action) == 0
        np.testing.assert_array_equal(policy.agent.predict(normalised), [action])
        raw, _, terminated, truncated, _ = env.step(action)
        normalised, *_ = envs.step(np.array([action]))
        if terminated or truncated:
            break
    env.close(), envs.close()
    batch = np.stack([raw, raw * 0.5, raw * 2])
    actions, _ = policy.act(batch)
    assert actions.shape == (3,) and actions[0] == policy.act(raw)[0]
    with pytest.raises(ValueError, match="takes \\[4\\] or a batch"):
        policy.act(np.zeros(5))


def test_act_carries_memory_as_evaluation_does(tmp_path):
    """A single env stepped through `act` with the state passed back takes the actions a one-env evaluation vector
    env takes with `Memory`, over a whole episode and into the next (state=None resets)."""
    run_dir, _ = rlfoundry.train("CartPole-v1:ppo-lstm", [*TINY, "train.total_timesteps=256"], tmp_path / "run")
    policy = rlfoundry.load_policy(run_dir)
    env, envs = policy.make_env(), policy.vector_env(1)
    raw, _ = env.reset(seed=3)
    normalised, _ = envs.reset(seed=3)
    state, memory, episodes = None, Memory(), 0
    for _ in range(400):
        action, state = policy.act(raw, state)
        assert state is not None
        np.testing.assert_array_equal(policy.agent.predict(normalised, True, memory), [action])
        raw, _, terminated, truncated, _ = env.step(action)
        normalised, _, vterm, vtrunc, _ = envs.step(np.array([action]))
        memory.ended(vterm | vtrunc)
        if terminated or truncated:
            episodes += 1
            raw, _ = env.reset()
            normalised, *_ = envs.step(np.array([0]))  # the vector env's autoreset step
            memory.ended(np.array([False]))
            state = None
    env.close(), envs.close()


def test_play_writes_videos_and_prints_returns(cartpole, tmp_path):
    result = invoke("play", cartpole, "--render", "video", "--episodes", 2, "--out", tmp_path / "videos")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("playing CartPole-v1:ppo (ppo, step 2,048)") and lines[0].endswith("render video")
    for i in range(2):
        match = re.fullmatch(rf"episode {i}: return ([\d.]+), length (\d+), video (.+)", lines[1 + i])
        assert match, lines[1 + i]
        assert float(match.group(1)) == int(match.group(2))  # CartPole: one point a step
        with imageio.get_reader(match.group(3), format="FFMPEG") as reader:
            assert sum(1 for _ in reader) == int(match.group(2)) + 1  # the reset frame, then one a step
    assert lines[-1].startswith("mean return ")
    none = invoke("play", cartpole, "--render", "none", "--episodes", 1)
    assert none.exit_code == 0 and "video" not in none.stdout.splitlines()[1]


def test_play_an_atari_game_from_pixels(tmp_path):
    """The pixel case: a whole Breakout game (cut at 30 steps here) from the stacked frames, into an mp4."""
    pytest.importorskip("ale_py")
    overrides = [*TINY, "train.total_timesteps=64", "env.num_envs=2", "algo.num_steps=32", "algo.minibatch_size=32",
                 "eval.at_end=false"]
    run_dir, _ = rlfoundry.train("ALE/Breakout-v5:ppo", overrides, tmp_path / "run")
    result = invoke("play", run_dir, "--render", "video", "--episodes", 1, "--max-steps", 30)
    assert result.exit_code == 0, result.output
    assert "episode 0: return 0.00, length 30 (cut short), video " in result.stdout
    with imageio.get_reader(run_dir / "videos" / "play_step64_ep0.mp4", format="FFMPEG") as reader:
        shapes = [frame.shape for frame in reader]
    assert len(shapes) == 31 and set(shapes) == {(210, 160, 3)}


def test_play_refuses_bad_input(cartpole):
    for args, message in [(["--render", "ansi"], "--render ansi: CartPole-v1 renders"),
                          (["--render", "3d"], "--render 3d: allowed: human, video, ansi, none"),
                          (["--checkpoint", "../x"], "--checkpoint '../x': allowed")]:
        result = invoke("play", cartpole, *args)
        assert result.exit_code == 2 and message in result.stderr, result.output
    assert invoke("play", cartpole.parent / "nope").exit_code == 2


RNG = np.random.default_rng(0)
EXPORTED = {
    # name: (spec, overrides, observation statistics)
    "mlp": ("CartPole-v1:ppo", ["env.normalize_obs=true"],
            (RNG.normal(size=4), RNG.uniform(0.1, 3.0, size=4), 100.0)),
    "cnn": ("ALE/Breakout-v5:ppo", [], None),
    "lstm": ("CartPole-v1:ppo-lstm", [], None),
    "sac-static": ("Pendulum-v1:sac", ["env.normalize_obs=static"], None),
    "dqn": ("CartPole-v1:dqn", [], None),
    "td3": ("Pendulum-v1:td3", ["env.normalize_obs=true"], (RNG.normal(size=3), RNG.uniform(0.1, 3.0, size=3), 50.0)),
}


@pytest.mark.parametrize("name", sorted(EXPORTED))
def test_exported_actors_act_as_the_policy(name, tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    spec, overrides, stats = EXPORTED[name]
    if spec.startswith("ALE/"):
        pytest.importorskip("ale_py")
    policy = fresh_policy(spec, overrides, stats)
    space = policy.observation_space
    if np.issubdtype(space.dtype, np.integer):
        obs = RNG.integers(0, 256, size=(300, *space.shape), dtype=space.dtype)
    else:
        obs = RNG.normal(size=(300, *space.shape)).astype(space.dtype) * 2
    export(policy, tmp_path / "actor.onnx", "onnx")
    export(policy, tmp_path / "actor.pt", "torchscript")
    session = onnxruntime.InferenceSession(str(tmp_path / "actor.onnx"))
    scripted = torch.jit.load(str(tmp_path / "actor.pt"))
    if name != "lstm":
        expected, _ = policy.act(obs)
        from_onnx = session.run(None, {"obs": obs})[0]
        from_script = scripted(torch.as_tensor(obs)).numpy()
    else:  # 100 steps of 3 envs, the memory carried by each caller
        sequence = obs.reshape(100, 3, *space.shape)
        names = [i.name for i in session.get_inputs()][1:]
        state, onnx_state = None, None
        script_state = None
        expected, from_onnx, from_script = [], [], []
        for step in sequence:
            action, state = policy.act(step, state)
            expected.append(action)
            if onnx_state is None:
                onnx_state = [np.zeros([d if isinstance(d, int) else 3 for d in i.shape], np.float32)
                              for i in session.get_inputs()[1:]]
                script_state = [torch.as_tensor(s) for s in onnx_state]
            action, *onnx_state = session.run(None, {"obs": step, **dict(zip(names, onnx_state))})
            from_onnx.append(action)
            action, *script_state = scripted(torch.as_tensor(step), *script_state)
            from_script.append(action.numpy())
        expected, from_onnx, from_script = map(np.stack, (expected, from_onnx, from_script))
    if policy.spec.discrete:
        np.testing.assert_array_equal(from_onnx, expected)
        np.testing.assert_array_equal(from_script, expected)
        assert len(np.unique(expected)) > 1  # the observations reach different actions
    else:
        np.testing.assert_allclose(from_onnx, expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(from_script, expected, rtol=1e-6, atol=1e-6)


def test_a_step_names_its_checkpoint_in_play_export_and_eval(cartpole, tmp_path):
    """--checkpoint 1024 is step_000000001024 wherever a checkpoint is chosen (publish took it already)."""
    from rlfoundry.cli.eval import evaluate_run

    step = min(int(p.name.removeprefix("step_")) for p in (cartpole / "checkpoints").glob("step_*"))
    played = invoke("play", cartpole, "--render", "none", "--episodes", 1, "--checkpoint", step)
    assert played.exit_code == 0 and f"step {step:,})" in played.stdout.splitlines()[0], played.output
    exported = invoke("export", cartpole, "--format", "torchscript", "--out", tmp_path / "p.pt", "--checkpoint", step)
    assert exported.exit_code == 0 and (tmp_path / "p.pt").is_file(), exported.output
    commands = typer.Typer(pretty_exceptions_enable=False)
    commands.command("eval")(evaluate_run)
    commands.command("other")(lambda: None)
    evaluated = CliRunner().invoke(commands, ["eval", str(cartpole), "--checkpoint", str(step), "--episodes", "1"])
    assert evaluated.exit_code == 0, evaluated.output
    assert f"(checkpoint step_{step:012d}, step {step:,})" in evaluated.stdout


def test_export_command(cartpole, tmp_path):
    result = invoke("export", cartpole, "--format", "torchscript", "--out", tmp_path / "p.pt")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p.pt").is_file() and "inputs: obs ['B', 4]; outputs: actions" in result.stdout
    bad = invoke("export", cartpole, "--format", "tflite", "--out", tmp_path / "p.x")
    assert bad.exit_code == 2 and "--format tflite: allowed: onnx, torchscript" in bad.stderr
    assert not (tmp_path / "p.x").exists()


def test_latent_agents_are_not_exported(tmp_path):
    policy = fresh_policy("rlfoundry/Reach-v0:dreamer", ["algo.size=size1m"])
    with pytest.raises(rlfoundry.config.errors.ConfigError, match="algo.name = 'dreamer': its actions come from"):
        export(policy, tmp_path / "x.onnx", "onnx")
    assert not (tmp_path / "x.onnx").exists()

"""MultiDiscrete and MultiBinary actions: a categorical per entry (`nets.heads.MultiCategoricalHead`), checked against
torch.distributions; PPO, A2C and REINFORCE learn a task that needs every entry right; the algorithms that cannot
take them refuse with one line naming the spaces they take; a trained policy acts and exports."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

import rlfoundry
from rlfoundry.config.errors import ConfigError
from rlfoundry.nets.heads import MultiCategoricalHead

QUIET = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "train.torch_threads=1",
         "env.vectorization=sync"]


class Match(gym.Env):
    """Observes a target per entry and earns 1 for each entry of its action that equals it; 10 steps an episode.
    Random play earns sum(1/n) a step; a policy that reads the target earns one per entry."""

    def __init__(self, kind: str = "multidiscrete"):
        sizes = [3, 4, 2] if kind == "multidiscrete" else [2, 2, 2, 2]
        self.sizes = np.array(sizes)
        space = spaces.MultiDiscrete(sizes) if kind == "multidiscrete" else spaces.MultiBinary(len(sizes))
        self.observation_space, self.action_space = space, space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.target = self.np_random.integers(0, self.sizes)
        return self.target.astype(self.observation_space.dtype), {}

    def step(self, action):
        reward = float((np.asarray(action) == self.target).sum())
        self.t += 1
        self.target = self.np_random.integers(0, self.sizes)
        return self.target.astype(self.observation_space.dtype), reward, False, self.t >= 10, {}


for kind in ("multidiscrete", "multibinary"):
    gym.register(f"test/Match-{kind}-v0", entry_point=Match, kwargs={"kind": kind})


def test_the_head_is_a_product_of_categoricals():
    torch.manual_seed(0)
    sizes = [3, 1, 4]
    head = MultiCategoricalHead(5, sizes, ortho_init=False)
    features = torch.randn(7, 5)
    logp = head(features)
    splits = [torch.distributions.Categorical(logits=chunk) for chunk in head.linear(features).split(sizes, -1)]
    actions = torch.stack([d.sample() for d in splits], -1)
    expected = sum(d.log_prob(a) for d, a in zip(splits, actions.unbind(-1)))
    torch.testing.assert_close(head.log_prob(logp, actions), expected)
    torch.testing.assert_close(head.entropy(logp), sum(d.entropy() for d in splits))
    greedy = head.sample(logp, deterministic=True)
    assert torch.equal(greedy, torch.stack([d.probs.argmax(-1) for d in splits], -1))
    draws = torch.stack([head.sample(logp[:1], deterministic=False) for _ in range(4000)])[:, 0]  # [4000, 3]
    frequencies = torch.stack([(draws[:, 2] == k).float().mean() for k in range(4)])
    torch.testing.assert_close(frequencies, splits[2].probs[0], atol=0.03, rtol=0)


@pytest.mark.parametrize(("algo", "kind", "steps", "core", "seed"), [
    ("ppo", "multidiscrete", 12_000, "identity", 1), ("ppo", "multidiscrete", 12_000, "identity", 2),
    ("a2c", "multibinary", 60_000, "identity", 2), ("reinforce", "multidiscrete", 20_000, "identity", 1),
    ("ppo", "multibinary", 12_000, "gru", 2),
])
def test_on_policy_algorithms_learn_to_match_every_entry(tmp_path, algo, kind, steps, core, seed):
    random_play = 10 * (sum(1 / n for n in (3, 4, 2)) if kind == "multidiscrete" else 4 * 0.5)  # 10.8, 20
    best = 10 * (3 if kind == "multidiscrete" else 4)  # 30, 40
    run_dir, summary = rlfoundry.train(f"test/Match-{kind}-v0:{algo}", [
        *QUIET, f"train.total_timesteps={steps}", "eval.every_steps=4000", "eval.episodes=20", "algo.lr=3e-3",
        "env.num_envs=8", "algo.num_steps=50", f"network.core={core}", f"train.seed={seed}"], tmp_path / "run")
    assert summary["best_eval_return"] >= random_play + 0.7 * (best - random_play), summary  # most of the way
    policy = rlfoundry.load_policy(run_dir, "best")
    env = policy.make_env()  # observations as the policy takes them: one-hot per entry
    obs, _ = env.reset(seed=0)
    action, _ = policy.act(obs)
    assert action.shape == env.action_space.shape and env.action_space.contains(action.astype(env.action_space.dtype))
    assert (action == env.unwrapped.target).sum() >= len(action) - 1  # it reads the target


@pytest.mark.parametrize("algo", ["dqn", "sac", "td3", "dreamer"])
def test_other_algorithms_refuse_them_naming_what_they_take(tmp_path, algo):
    with pytest.raises(ConfigError, match=f"algo.name = '{algo}' acts in .* action spaces; test/Match-multidiscrete"
                                          r"-v0 has MultiDiscrete\(\[3 4 2\]\)|DQN needs Discrete"):
        rlfoundry.train(f"test/Match-multidiscrete-v0:{algo}", QUIET, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_multi_discrete_policy_exports(tmp_path):
    from rlfoundry.trained.export import export

    run_dir, _ = rlfoundry.train("test/Match-multidiscrete-v0:ppo", [*QUIET, "train.total_timesteps=800",
                                                                      "eval.every_steps=0", "eval.episodes=1"],
                                 tmp_path / "run")
    policy = rlfoundry.load_policy(run_dir)
    export(policy, tmp_path / "policy.pt", "torchscript")
    graph = torch.jit.load(str(tmp_path / "policy.pt"))
    targets = [(a, b, c) for a in range(3) for b in range(4) for c in range(2)]  # every observation, one-hot
    obs = np.array([spaces.flatten(spaces.MultiDiscrete([3, 4, 2]), np.array(t)) for t in targets], np.float32)
    exported = graph(torch.as_tensor(obs))
    exported = exported[0] if isinstance(exported, tuple) else exported
    np.testing.assert_array_equal(exported.numpy(), policy.act(obs)[0])

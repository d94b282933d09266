"""Is PPO's stand-still on Hopper-v5 ours or the hyperparameters'? Stable-Baselines3 with the settings the
`Hopper-v5:ppo` preset takes from rl-baselines3-zoo (hyperparams/ppo.yml, "Hopper-v3": 512 steps, minibatch 32,
5 epochs, lr 9.8e-5, gamma 0.999, lambda 0.99, log_std_init -2, no orthogonal init, 256x256 ReLU, VecNormalize
with the same gamma), with a deterministic evaluation every 25k steps (5 episodes, observations normalised with the
training statistics). A return near 1,000 over 1,000-step episodes is the stand-still: the healthy bonus of 1 a step
with no forward progress.

Run:  python benchmarks/hopper_ppo_sb3_check.py [--seeds 2] [--steps 150000]   (each seed in its own process)
Needs Stable-Baselines3 and MuJoCo:  pip install -e .[bench,mujoco]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import numpy as np

EVERY = 25_000


def run(seed: int, steps: int) -> None:
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    env = VecNormalize(make_vec_env("Hopper-v5", n_envs=1, seed=seed), gamma=0.999)

    class Evaluate(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % EVERY == 0:
                probe = gym.make("Hopper-v5")
                returns, lengths = [], []
                for episode in range(5):
                    obs, _ = probe.reset(seed=10_000 + episode)
                    total, length, done = 0.0, 0, False
                    while not done:
                        action, _ = self.model.predict(env.normalize_obs(obs), deterministic=True)
                        obs, reward, terminated, truncated, _ = probe.step(action)
                        total, length, done = total + float(reward), length + 1, terminated or truncated
                    returns.append(total)
                    lengths.append(length)
                print(f"seed {seed}  {self.num_timesteps:>8,} steps  eval return {np.mean(returns):7.1f}  "
                      f"episode length {np.mean(lengths):6.1f}", flush=True)
            return True

    model = PPO("MlpPolicy", env, n_steps=512, batch_size=32, n_epochs=5, learning_rate=9.80828e-05, gamma=0.999,
                gae_lambda=0.99, clip_range=0.2, ent_coef=0.00229519, vf_coef=0.835671, max_grad_norm=0.7, seed=seed,
                device="cpu", policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn=torch.nn.ReLU,
                                                 net_arch=dict(pi=[256, 256], vf=[256, 256])))
    model.learn(steps, callback=Evaluate())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=150_000)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)  # one seed, in a child process
    args = parser.parse_args()
    if args.seed is not None:
        run(args.seed, args.steps)
        return 0
    children = [subprocess.Popen([sys.executable, __file__, "--seed", str(seed), "--steps", str(args.steps)])
                for seed in range(1, args.seeds + 1)]
    return max(child.wait() for child in children)


if __name__ == "__main__":
    sys.exit(main())

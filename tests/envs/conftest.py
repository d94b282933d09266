"""Fixtures the env tests share."""

from __future__ import annotations

import pytest

from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import build as build_envs


@pytest.fixture
def build():
    """build_envs() for an ALE id with `env.atari` options, closing every env the test built."""
    built = []

    def _build(env_id: str = "ALE/Breakout-v5", num_envs: int = 2, env_options: dict | None = None, **atari):
        envs, spec = build_envs(EnvConfig(id=env_id, num_envs=num_envs, atari=atari, **(env_options or {})))
        built.append(envs)
        return envs, spec

    yield _build
    for envs in built:
        envs.close()

"""Observation spaces other than a Box, as the networks read them: one vector, the preprocessing Stable-Baselines3
applies. Discrete is one-hot; MultiDiscrete a one-hot per entry, concatenated; MultiBinary its bits; Tuple and Dict
their entries, each so, concatenated (a Dict's in its own key order). Without images that is
`gymnasium.spaces.flatten`, cast to float32 (`FlatObservation`): its one-hots are int64, which the networks would
take for integer frames.

A Tuple or Dict with images in it (uint8 [H, W, C] or [C, H, W]: MiniGrid's view beside its direction, a camera
beside a robot's joints) is packed instead (`PackedObservation`): the images channel-first and the other entries as
above, in one vector whose space, a `PackedBox`, lists the parts; the networks' `PackedEncoder` reads each image
through the image encoder and the rest as it is (SB3's CombinedExtractor). The vector is uint8 when every entry fits
a byte (images, one-hots, bits: MiniGrid's), so replay holds the frames at a byte each; else float32.

The wrapper is the last of a single env's own (after `env.wrappers`, which see the env's own observations: a
`FilterObservation` there picks a Dict's entries), so every algorithm, memory core, replay, export and
`load_policy` sees the vector. Entries that have no fixed-size vector form (Text, Graph, Sequence) are refused with
the entry named.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlfoundry.config.errors import ConfigError
from rlfoundry.envs.wrappers import is_channel_last, is_image_space

FLATTENED = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Tuple, spaces.Dict)


def _entries(space: spaces.Space, name: str = "") -> Iterator[tuple[str, spaces.Space]]:
    """(path, space) of every leaf of a Tuple or Dict (`[0]`, `['goal']`), or the space itself."""
    if isinstance(space, spaces.Dict):
        for key, child in space.spaces.items():
            yield from _entries(child, f"{name}[{key!r}]")
    elif isinstance(space, spaces.Tuple):
        for index, child in enumerate(space.spaces):
            yield from _entries(child, f"{name}[{index}]")
    else:
        yield name, space


def needs_flattening(space: spaces.Space) -> bool:
    return isinstance(space, FLATTENED)


def check_flattenable(env_id: str, space: spaces.Space) -> None:
    """ConfigError naming the first entry of `space` with no fixed-size vector form."""
    for path, leaf in _entries(space):
        if not isinstance(leaf, (spaces.Box, *FLATTENED)):
            where = f"its entry {path}" if path else "it"
            raise ConfigError(f"env.id = '{env_id}': observation space {space}: {where} is a {type(leaf).__name__}, "
                              "which has no fixed-size vector form; drop it with env.wrappers (FilterObservation "
                              "for a Dict) or encode it in a wrapper of your own")


class FlatObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """The env's observations as one float32 vector (module docstring)."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        flat = spaces.flatten_space(env.observation_space)
        assert isinstance(flat, spaces.Box), "check_flattenable lets only Box-flattening spaces through"
        self.observation_space = spaces.Box(flat.low.astype(np.float32), flat.high.astype(np.float32),
                                            dtype=np.float32)

    def observation(self, observation) -> np.ndarray:
        return np.asarray(spaces.flatten(self.env.observation_space, observation), dtype=np.float32)


@dataclass(frozen=True)
class Part:
    """One entry of a packed observation: where it sits in the vector and what it holds."""

    path: str  # the entry in the env's space: ['image'], [0]
    kind: str  # "image": uint8 [C, H, W]; "bytes": other uint8 values (scaled like images); "vector": the rest
    shape: tuple[int, ...]  # [C, H, W] for an image, [n] otherwise
    offset: int

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class PackedBox(spaces.Box):
    """The space of packed observations: a 1-D Box that also lists its `parts`."""

    def __init__(self, parts: tuple[Part, ...], low: np.ndarray, high: np.ndarray, dtype):
        super().__init__(low.astype(dtype), high.astype(dtype), dtype=dtype)
        self.parts = parts


def _byte_valued(leaf: spaces.Space) -> bool:
    """Whether a leaf's vector form fits a uint8: one-hots and bits, and uint8 Boxes."""
    return isinstance(leaf, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)) or (
        isinstance(leaf, spaces.Box) and leaf.dtype == np.uint8)


def _values(space: spaces.Space, value) -> Iterator:
    """The leaves' values of an observation, in `_entries`' order."""
    if isinstance(space, spaces.Dict):
        for key, child in space.spaces.items():
            yield from _values(child, value[key])
    elif isinstance(space, spaces.Tuple):
        for child, item in zip(space.spaces, value):
            yield from _values(child, item)
    else:
        yield value


class PackedObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """A Tuple or Dict with images as one vector of its parts (module docstring)."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        self.plan: list[tuple[spaces.Space, str]] = []  # per leaf: its space and how it is packed (image: its layout)
        parts, lows, highs, offset = [], [], [], 0
        for path, leaf in _entries(env.observation_space):
            if is_image_space(leaf):
                shape = tuple(int(n) for n in leaf.shape)
                last = is_channel_last(leaf)
                kind, shape = "image", (shape[2], shape[0], shape[1]) if last else shape
                low, high = np.zeros(math.prod(shape)), np.full(math.prod(shape), 255.0)
                self.plan.append((leaf, "channel_last" if last else "image"))
            else:
                flat = spaces.flatten_space(leaf)
                assert isinstance(flat, spaces.Box) and flat.shape is not None  # check_flattenable let it through
                kind = "bytes" if isinstance(leaf, spaces.Box) and leaf.dtype == np.uint8 else "vector"
                shape, low, high = (int(flat.shape[0]),), flat.low.astype(np.float64), flat.high.astype(np.float64)
                self.plan.append((leaf, "flat"))
            parts.append(Part(path, kind, shape, offset))
            lows.append(low)
            highs.append(high)
            offset += math.prod(shape)
        dtype = np.uint8 if all(_byte_valued(leaf) for leaf, _ in self.plan) else np.float32
        self.observation_space = PackedBox(tuple(parts), np.concatenate(lows), np.concatenate(highs), dtype)

    def observation(self, observation) -> np.ndarray:
        pieces = []
        for (leaf, how), value in zip(self.plan, _values(self.env.observation_space, observation)):
            if how == "flat":
                pieces.append(np.asarray(spaces.flatten(leaf, value)).ravel())
            else:
                pieces.append((np.transpose(value, (2, 0, 1)) if how == "channel_last" else np.asarray(value)).ravel())
        return np.concatenate(pieces).astype(self.observation_space.dtype, copy=False)


def packed_parts(space: spaces.Space) -> tuple[Part, ...]:
    """The parts of a packed observation's space (`PackedBox`); none for any other space."""
    return space.parts if isinstance(space, PackedBox) else ()


def has_images(space: spaces.Space) -> bool:
    """An image observation, or a packed one with images in it."""
    return is_image_space(space) or any(part.kind == "image" for part in packed_parts(space))


def first_image(space: spaces.Space) -> spaces.Box | None:
    """The image an image encoder would be chosen for: the observation itself, or a packed one's first image."""
    if is_image_space(space):
        return space
    part = next((part for part in packed_parts(space) if part.kind == "image"), None)
    return None if part is None else spaces.Box(0, 255, part.shape, np.uint8)


def flattened(make_env: Callable[[], gym.Env], env_id: str) -> gym.Env:
    """`make_env()`, observing one vector where its space is not a Box: a module-level function, so a partial of it
    pickles for async envs."""
    env = make_env()
    if not needs_flattening(env.observation_space):
        return env
    try:
        check_flattenable(env_id, env.observation_space)
    except ConfigError:
        env.close()
        raise
    if any(is_image_space(leaf) for _, leaf in _entries(env.observation_space)):
        return PackedObservation(env)
    return FlatObservation(env)

"""OCAtari's objects as a fixed-size observation vector: `env.atari.obs_type: objects` (see `rlfoundry.envs.atari`).

OCAtari (Delfosse et al. 2023, arXiv:2306.08649; checked against 2.2.1) finds a game's objects in the console's RAM
by updating a list of objects after each step. The list is state, so it is kept from the reset on and updated once
per agent step, as OCAtari's own env does. Slot i of the vector holds (x, y, w, h) of entry i of the list, zeros
while it is absent, HUD objects left out; a game has max(sum of its `MAX_NB_OBJECTS`, its initial list's length)
slots. OCAtari 2.2.1 was written for NumPy 1, so it gets the RAM as int64, which gives NumPy 1's results under NumPy
2. docs/environments/atari.md has the details.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os

import numpy as np

from rlfoundry.config.errors import ConfigError

FEATURES = ("x", "y", "w", "h")
INSTALL = "pip install 'rlfoundry[ocatari]' and then pip install --no-deps ocatari (its wheel pins numpy<2)"

# Games whose RAM extraction in an OCAtari release fails during play, found by 10,000 random steps of every game
# (with int64 RAM, sticky actions): refused up front rather than failing mid-run. Any other failure during a run is
# a RuntimeError naming OCAtari, the game and the error.
BROKEN = {
    "2.2.1": {
        "AirRaid": "ocatari/ram/airraid.py indexes a list with a NumPy bool (TypeError under NumPy 2) on the first step",
        "RoadRunner": "ocatari/ram/roadrunner.py uses an undefined name BirdSeeds (NameError) during play",
        "TimePilot": "ocatari/ram/timepilot.py assigns past the end of its object list (IndexError) on the first step",
    },
}


def _import_ocatari():
    """OCAtari's games and RAM extraction functions, or a one-line ConfigError naming the install commands."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")  # ocatari imports pygame, which greets on stdout
    try:
        from ocatari.core import AVAILABLE_GAMES
        from ocatari.ram import extract_ram_info
    except ImportError as exc:
        raise ConfigError(f"env.atari.obs_type = objects needs the ocatari package ({exc}); install it with: "
                          f"{INSTALL}") from None
    return AVAILABLE_GAMES, extract_ram_info


def ocatari_version() -> str:
    return importlib.metadata.version("ocatari")


def game_of(env_id: str) -> str:
    """ALE/SpaceInvaders-v5 → SpaceInvaders, OCAtari's name for the game."""
    return env_id.removeprefix("ALE/").rsplit("-v", 1)[0]


def _ram_module(game: str, available: list[str]):
    """OCAtari's RAM extraction module of a game, or None when it has none (or an incomplete one)."""
    if game not in available:
        return None
    try:
        module = importlib.import_module(f"ocatari.ram.{game.lower()}")
    except ImportError:
        return None
    parts = ("MAX_NB_OBJECTS", "_init_objects_ram", "_detect_objects_ram")
    return module if all(hasattr(module, part) for part in parts) else None


def supported_games() -> list[str]:
    """The games (ALE/<Game>-v5) whose objects this OCAtari gives."""
    available, _ = _import_ocatari()
    broken = BROKEN.get(ocatari_version(), {})
    return [game for game in available if game not in broken and _ram_module(game, available) is not None]


def check_game(env_id: str):
    """The game's `ocatari.ram` module, or a ConfigError saying why OCAtari cannot give this id's objects."""
    available, _ = _import_ocatari()
    game = game_of(env_id)
    module = _ram_module(game, available)
    if module is None:
        raise ConfigError(f"env.atari.obs_type = objects: OCAtari {ocatari_version()} has no RAM object extraction "
                          f"for {env_id}; supported games (ALE/<Game>-v5): {', '.join(supported_games())}")
    broken = BROKEN.get(ocatari_version(), {}).get(game)
    if broken is not None:
        raise ConfigError(f"env.atari.obs_type = objects: OCAtari {ocatari_version()}'s object extraction fails on "
                          f"{env_id} ({broken}); use obs_type pixels or ram for this game")
    return module


class ObjectView:
    """One env's OCAtari object list, kept across steps, written as the fixed-size vector described above."""

    uncapturable = ("env.atari.obs_type = objects: OCAtari's object list is Python objects that carry information "
                    "from step to step, which the env state cannot hold")

    def __init__(self, env_id: str):
        module = check_game(env_id)
        _, self.extract = _import_ocatari()
        self.env_id, self.game = env_id, game_of(env_id)
        self.slots = max(sum(module.MAX_NB_OBJECTS.values()), len(self.extract.init_objects(self.game, False)))
        self.size = self.slots * len(FEATURES)
        self.objects: list = []

    def reset(self, ram: np.ndarray, out: np.ndarray) -> None:
        """A new game: OCAtari's initial list, then the objects of the reset RAM into `out` [size]."""
        self.objects = self.extract.init_objects(self.game, False)
        self.observe(ram, out)

    def observe(self, ram: np.ndarray, out: np.ndarray) -> None:
        """Update the list from the RAM (OCAtari's `detect_objects_ram`) and write the vector into `out`."""
        try:
            self.extract.detect_objects_ram(self.objects, ram.astype(np.int64), self.game, False)
        except Exception as exc:
            raise RuntimeError(f"OCAtari {ocatari_version()}'s object extraction failed on {self.env_id}: "
                               f"{type(exc).__name__}: {exc}") from exc
        boxes = out.reshape(self.slots, len(FEATURES))
        boxes[:] = 0.0
        for slot, obj in enumerate(self.objects[: self.slots]):
            if obj:
                boxes[slot] = obj.xywh

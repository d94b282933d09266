"""The environments' own state, for exact resume: captured as JSON values and numpy arrays, no pickle.

A vector env's state is what its chain of wrappers and envs holds in plain attributes (arrays, numbers, RNGs,
running statistics, deques, enum members, dicts with string keys of such values), plus simulators captured whole:
MuJoCo's `MjData` through `mj_getState` (also of a MuJoCo env another env holds, as Gymnasium-Robotics' mazes hold
their point or ant), ALE's emulator through `cloneState(include_rng=True)`, a DeepMind Control
env's `Physics` and its task's random state, and POPGym's card decks walked as objects. Spaces, specs, callables
and renderers are configuration, skipped. An object whose state no attribute shows (Brax's JAX arrays) offers
`capture_state() -> {name: array}` and `restore_state(arrays)`. Where the state cannot be reached
(the C++ worlds of Box2D, vizdoom and stable-retro, ale_py's AtariVectorEnv, OCAtari's object lists, MiniGrid's
grid objects, worker processes) `capture` returns None and the reason, and the trainer resets those envs on resume.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Any

import numpy as np
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv, VectorEnv

# Attributes that hold configuration, caches or handles rather than state.
SKIP = {"env", "envs", "env_fns", "spec", "_cached_spec", "metadata", "_metadata", "render_mode", "mujoco_renderer",
        "screen", "clock", "surf", "screens", "func", "wrapper", "_saved_kwargs", "_ezpickle_args", "_ezpickle_kwargs",
        "model", "fullpath", "observation_structure"}
PLAIN = (bool, int, float, str, type(None))
# The entry under which an object's own `capture_state()` arrays are recorded (Brax's envs: rlfoundry.envs.brax).
OWN = "__own_state__"


class Uncapturable(Exception):
    pass


def _encode(value: Any, arrays: dict[str, np.ndarray], key: str) -> Any:
    """A JSON-able description of one attribute value; arrays go to `arrays` under `key`.
    Raises Uncapturable for state it cannot hold, returns NotImplemented for values that are not state."""
    # numpy scalars first (np.float64 is also a Python float): their type matters, because NumPy 2 promotes
    # float32 arrays to float64 against an np.float64 but not against a Python float.
    if isinstance(value, np.generic):
        return {"scalar": value.item(), "dtype": value.dtype.str}
    if isinstance(value, enum.Enum):  # before PLAIN: an IntEnum is an int, and restored as one it loses `.value`
        if not isinstance(value.value, PLAIN):
            raise Uncapturable(f"{key} is an enum member whose value is {type(value.value).__name__}")
        return {"enum": value.value}
    if isinstance(value, PLAIN):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise Uncapturable(f"{key} is an object array")
        arrays[key] = value.copy()  # a snapshot: the env writes its arrays in place as it steps
        return {"array": key}
    if isinstance(value, np.random.Generator):
        return {"generator": value.bit_generator.state}
    if isinstance(value, np.random.RandomState):
        state = value.get_state(legacy=False)  # MT19937 key and position, and the cached Gaussian
        if state["bit_generator"] != "MT19937":
            raise Uncapturable(f"{key} is a RandomState over {state['bit_generator']}")
        arrays[key] = state["state"]["key"].copy()
        return {"random_state": {"key": key, "pos": int(state["state"]["pos"]), "has_gauss": int(state["has_gauss"]),
                                 "gauss": float(state["gauss"])}}
    if isinstance(value, deque):
        items = [_encode(v, arrays, f"{key}.{i}") for i, v in enumerate(value)]
        return {"deque": items, "maxlen": value.maxlen}
    if isinstance(value, (tuple, list)) and all(isinstance(v, PLAIN + (np.generic,)) for v in value):
        return {"tuple" if isinstance(value, tuple) else "list": [_encode(v, arrays, key) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):  # POPGym's hands, its bandit's info
        entries = {k: _encode(v, arrays, f"{key}.{k}") for k, v in value.items()}
        if any(v is NotImplemented for v in entries.values()):
            return NotImplemented  # holds configuration (spaces, callables): configuration as a whole
        return {"dict": entries}
    return _encode_foreign(value, arrays, key)


def _encode_foreign(value: Any, arrays: dict[str, np.ndarray], key: str) -> Any:
    """`_encode` for objects of the simulators' own packages, known by their module, and our running statistics."""
    module = type(value).__module__
    if module.startswith("mujoco"):
        if type(value).__name__ == "MjData":
            return {"mjdata": True}  # handled by the owner, which also has the model
        return NotImplemented
    if module.startswith(("gymnasium.envs.mujoco", "gymnasium_robotics.")) and _is_mujoco_env(value):
        return {"object": _capture_object(value, arrays, key)}  # a simulated body another env drives (the mazes')
    if module.startswith("ale_py") and type(value).__name__ == "ALEInterface":
        return {"ale": True}  # handled by the owner, as MjData
    if module.startswith("dm_control."):
        return _encode_dm_control(value, arrays, key)
    if module.startswith("Box2D"):
        raise Uncapturable("Box2D keeps its world in C++ objects")
    if module.startswith(("vizdoom", "stable_retro")):
        raise Uncapturable(f"{module.partition('.')[0]} keeps its game in C++ objects")
    if module == "popgym.core.deck" and type(value).__name__ == "Deck":  # the order, the cards left, the hands
        return {"object": _capture_object(value, arrays, key)}
    if module.startswith(("minigrid.core.grid", "minigrid.core.world_object")):
        raise Uncapturable("MiniGrid keeps its grid and what the agent carries in Python objects")
    reason = getattr(type(value), "uncapturable", None)  # a class of ours that says why (OCAtari's object view)
    if isinstance(reason, str):
        raise Uncapturable(reason)
    if type(value).__name__ == "RunningMeanStd":
        return {"object": _capture_object(value, arrays, key)}
    return NotImplemented  # spaces, callables and other configuration


def _is_mujoco_env(value: Any) -> bool:
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

    return isinstance(value, MujocoEnv)


def _encode_dm_control(value: Any, arrays: dict[str, np.ndarray], key: str) -> Any:
    """dm_control's suite environment and task walked as objects, its Physics as one integration state."""
    import mujoco
    from dm_control import composer
    from dm_control.mujoco.engine import Physics
    from dm_control.rl import control

    if isinstance(value, Physics):
        arrays[key] = value.get_state(sig=mujoco.mjtState.mjSTATE_INTEGRATION)
        return {"physics": key}
    if isinstance(value, (control.Environment, control.Task)):
        return {"object": _capture_object(value, arrays, key)}
    if isinstance(value, composer.Environment):
        raise Uncapturable("dm_control composer environments (manipulation, locomotion) keep their state in entity "
                           "trees; only suite ids are captured")
    return NotImplemented  # cameras, specs and other configuration


def _capture_object(obj: Any, arrays: dict[str, np.ndarray], prefix: str) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for name, value in vars(obj).items():
        if name in SKIP:
            continue
        encoded = _encode(value, arrays, f"{prefix}.{name}")
        if encoded is NotImplemented:
            continue
        if isinstance(encoded, dict) and encoded.get("mjdata"):
            import mujoco

            spec = mujoco.mjtState.mjSTATE_INTEGRATION
            buffer = np.empty(mujoco.mj_stateSize(obj.model, spec), dtype=np.float64)
            mujoco.mj_getState(obj.model, value, buffer, spec)
            arrays[f"{prefix}.{name}"] = buffer
            encoded = {"mjdata": f"{prefix}.{name}"}
        elif isinstance(encoded, dict) and encoded.get("ale"):
            serialized = value.cloneState(include_rng=True).serialize()
            arrays[f"{prefix}.{name}"] = np.frombuffer(serialized, dtype=np.uint8).copy()
            encoded = {"ale": f"{prefix}.{name}"}
        state[name] = encoded
    if callable(getattr(obj, "capture_state", None)):  # state the attribute walk cannot see (JAX arrays)
        own = obj.capture_state()
        for name, array in own.items():
            arrays[f"{prefix}.{OWN}.{name}"] = array
        state[OWN] = {name: f"{prefix}.{OWN}.{name}" for name in own}
    return state


def _decode(current: Any, encoded: Any, arrays: dict[str, np.ndarray]) -> Any:
    if not isinstance(encoded, dict):
        return encoded
    if "scalar" in encoded:
        return np.dtype(encoded["dtype"]).type(encoded["scalar"])
    if "array" in encoded:
        return np.array(arrays[encoded["array"]])
    if "generator" in encoded:
        if isinstance(current, np.random.Generator):
            current.bit_generator.state = encoded["generator"]  # in place: other objects may hold this generator
            return current
        bit_generator = getattr(np.random, encoded["generator"]["bit_generator"])()  # an env never reset yet
        bit_generator.state = encoded["generator"]
        return np.random.Generator(bit_generator)
    if "random_state" in encoded:
        saved = encoded["random_state"]
        state = {"bit_generator": "MT19937", "state": {"key": arrays[saved["key"]], "pos": saved["pos"]},
                 "has_gauss": saved["has_gauss"], "gauss": saved["gauss"]}
        random_state = current if isinstance(current, np.random.RandomState) else np.random.RandomState()
        random_state.set_state(state)  # in place: other objects may hold this RandomState
        return random_state
    if "physics" in encoded:
        import mujoco

        current.set_state(arrays[encoded["physics"]], sig=mujoco.mjtState.mjSTATE_INTEGRATION)
        current.forward()
        return current
    if "deque" in encoded:
        return deque((_decode(None, v, arrays) for v in encoded["deque"]), maxlen=encoded["maxlen"])
    if "tuple" in encoded:
        return tuple(_decode(None, v, arrays) for v in encoded["tuple"])
    if "list" in encoded:
        return [_decode(None, v, arrays) for v in encoded["list"]]
    if "enum" in encoded:
        if not isinstance(current, enum.Enum):
            raise ValueError(f"an enum member ({encoded['enum']!r}) saved for an attribute that now holds {current!r}")
        return type(current)(encoded["enum"])
    if "dict" in encoded:
        previous = current if isinstance(current, dict) else {}
        return {k: _decode(previous.get(k), v, arrays) for k, v in encoded["dict"].items()}
    if "object" in encoded:
        _restore_object(current, encoded["object"], arrays)
        return current
    raise ValueError(f"unknown env state entry {encoded}")


def _restore_object(obj: Any, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    for name, encoded in state.items():
        if name == OWN:
            obj.restore_state({own: arrays[key] for own, key in encoded.items()})
            continue
        if isinstance(encoded, dict) and "mjdata" in encoded:
            import mujoco

            mujoco.mj_setState(obj.model, getattr(obj, name), arrays[encoded["mjdata"]], mujoco.mjtState.mjSTATE_INTEGRATION)
            mujoco.mj_forward(obj.model, getattr(obj, name))
            continue
        if isinstance(encoded, dict) and "ale" in encoded:
            from ale_py import ALEState

            getattr(obj, name).restoreState(ALEState(arrays[encoded["ale"]].tobytes()))
            continue
        setattr(obj, name, _decode(getattr(obj, name, None), encoded, arrays))


def _chain(env: Any) -> list[Any]:
    """An env and every env it wraps, outermost first."""
    chain = [env]
    while hasattr(chain[-1], "env"):
        chain.append(chain[-1].env)
    return chain


def capture(envs: VectorEnv) -> tuple[dict[str, Any] | None, dict[str, np.ndarray], str | None]:
    """(state, arrays, None), or (None, {}, the reason) when this family's state cannot be captured."""
    arrays: dict[str, np.ndarray] = {}
    layers = _chain(envs)
    base = layers[-1]
    if isinstance(base, AsyncVectorEnv):
        return None, {}, "the sub-envs live in worker processes (async vectorization)"
    if type(base).__module__.startswith("ale_py"):
        return None, {}, ("ale_py's AtariVectorEnv keeps its emulators in C++ without a state API; "
                          "set env.atari.backend=single for exact resume")
    try:
        state: dict[str, Any] = {"layers": [_capture_object(layer, arrays, f"env.{i}") for i, layer in enumerate(layers)]}
        if isinstance(base, SyncVectorEnv):
            state["sub_envs"] = [[_capture_object(layer, arrays, f"sub.{j}.{i}") for i, layer in enumerate(_chain(sub))]
                                 for j, sub in enumerate(base.envs)]
    except Uncapturable as exc:
        return None, {}, str(exc)
    return state, arrays, None


def restore(envs: VectorEnv, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    layers = _chain(envs)
    if len(layers) != len(state["layers"]):
        raise ValueError("the env state was captured from a different wrapper chain")
    for layer, layer_state in zip(layers, state["layers"]):
        _restore_object(layer, layer_state, arrays)
    for sub, sub_state in zip(getattr(layers[-1], "envs", []), state.get("sub_envs", [])):
        for layer, layer_state in zip(_chain(sub), sub_state):
            _restore_object(layer, layer_state, arrays)

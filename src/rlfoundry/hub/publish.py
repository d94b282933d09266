"""`rlfoundry publish`: a trained policy as a model repository on the Hugging Face Hub.

    folder = build_folder("runs/...", "runs/.../publish/ppo-CartPole-v1", repo="ORG/ppo-CartPole-v1")
    upload(folder, "ORG/ppo-CartPole-v1")

`build_folder` loads the policy (`rlfoundry.hub.load_policy`), evaluates it on the run's evaluation seed, records one
replay, and writes the model folder (`rlfoundry.hub.MODEL_FILES` plus the card, the video and the results) into a
hidden temporary directory that is renamed into place: a failure or a kill leaves no half-written folder under the
final name. `upload` sends the whole folder as ONE commit (`HfApi.create_commit`; `upload_folder` may split large
folders into several commits when hf_xet is installed), which the Hub applies whole or not at all, and retries
transient failures (connection errors, HTTP 408/429/5xx) with backoff.

The card's metadata follows what Stable-Baselines3's `package_to_hub` and the RL Zoo write (huggingface_sb3
`generate_metadata`): tags, and a `model-index` whose result has task type `reinforcement-learning`, the env id as
dataset name and type, and the metric `mean_reward` with the value "mean +/- std", so the Hub shows the score and
ranks it beside other libraries' agents for the same env.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import numpy as np
import torch
import yaml

from rlfoundry import envs as envs_lib
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import LoggingConfig
from rlfoundry.hub import (
    HF_PREFIX,
    MODEL_FORMAT,
    MODEL_VERSION,
    is_model_folder,
    load_policy,
    local_path,
    read,
    stats_json,
)
from rlfoundry.run import checkpoint as ckpt
from rlfoundry.run.weights import checkpoint_name, network_weights
from rlfoundry.sinks.files import writing
from rlfoundry.trained import policy as policy_lib

CARD = "README.md"
VIDEO = "replay.mp4"
RESULTS = "results.json"
REPRODUCE = "rlfoundry train config.yaml"
# names the Hub accepts (as huggingface_hub.utils.validate_repo_id checks them): ASCII letters, digits, - _ .; no
# leading or trailing - or ., no -- or .., at most 96 characters
_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")
RETRY_DELAYS = (2.0, 8.0)  # seconds before the second and the third attempt
RETRY_STATUS = (408, 429, 500, 502, 503, 504)


class UploadError(RuntimeError):
    """The upload failed at run time (exit 1); the message says what the Hub repository holds now."""


@dataclass
class Built:
    folder: Path
    returns: list[float]
    step: int
    checkpoint: str
    video_note: str | None  # why there is no video when one was asked for


def check_repo(repo: str) -> str:
    """`ORG/NAME` with Hub-valid names (ConfigError otherwise)."""
    parts = str(repo).split("/")
    if len(parts) != 2 or not all(_NAME.fullmatch(p) and "--" not in p and ".." not in p for p in parts):
        raise ConfigError(f"--repo {repo!r}: expected ORG/NAME (letters, digits, '-', '_', '.'; no leading or "
                          "trailing '-' or '.', no '--' or '..', at most 96 characters each)")
    return str(repo)


def default_model_name(cfg) -> str:
    return f"{cfg.variant}-{cfg.env.id.replace('/', '-')}"


def build_folder(run: str | Path, out_dir: str | Path, checkpoint: str | None = None, episodes: int = 10,
                 video: bool = True, repo: str | None = None, overwrite: bool = False,
                 runs_root: str | Path = "runs") -> Built:
    """Write the model folder of RUN's checkpoint (a run directory, `@last`, a model folder or `hf://ORG/NAME`; see
    `rlfoundry.hub.load_policy`) to `out_dir`, evaluated over `episodes` episodes. `repo` is named in the card's usage
    lines. An existing non-empty `out_dir` is refused unless `overwrite`; it is replaced only once the new folder is
    complete. Raises ConfigError (CheckpointError included) for unusable input, before anything is written."""
    if episodes < 1:
        raise ConfigError(f"--episodes {episodes}: must be at least 1")
    if repo is not None:
        check_repo(repo)
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir()) and not overwrite)):
        raise ConfigError(f"{out_dir} exists and is not an empty folder (--overwrite replaces it; a folder built "
                          f"before is uploaded as it is by `rlfoundry publish {out_dir} --repo ORG/NAME`)")
    source = local_path(run, runs_root)
    policy = load_policy(source, checkpoint)
    policy.source = str(run)
    label, step_dir = _checkpoint_names(source, checkpoint)
    cfg = policy.cfg
    seed = cfg.train.seed + cfg.eval.seed_offset
    returns, lengths = _evaluate(policy, episodes, seed)
    marker = {"format": MODEL_FORMAT, "version": MODEL_VERSION, "step": policy.step, "checkpoint": label,
              "checkpoint_dir": step_dir, "repo": repo, "env_id": cfg.env.id, "algo": cfg.algo.name,
              "variant": cfg.variant, "seed": cfg.train.seed, "reproduce": REPRODUCE,
              "rlfoundry_version": _version(), "created": datetime.now(UTC).isoformat(timespec="seconds")}
    results = {"env_id": cfg.env.id, "mean_reward": float(np.mean(returns)), "std_reward": float(np.std(returns)),
               "episodes": len(returns), "returns": returns, "lengths": lengths, "seed": seed,
               "deterministic": cfg.eval.deterministic, "checkpoint": label, "step": policy.step,
               "eval_datetime": marker["created"]}
    total_steps = _total_steps(source, cfg)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".tmp-{out_dir.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)  # left by a killed publish with our pid
    tmp.mkdir()
    try:
        _write(tmp / "config.yaml", shareable_config((source / "config.yaml").read_text()))
        _write_weights(tmp / "model.safetensors", policy)
        _write(tmp / "normalization.json", _json(stats_json(policy.obs_stats)))
        _write(tmp / "rlfoundry.json", _json(marker))
        _write(tmp / RESULTS, _json(results))
        note = _record(policy, tmp / VIDEO, seed) if video else None
        _write(tmp / CARD, model_card(cfg, results, marker, total_steps, (tmp / VIDEO).is_file()).encode())
        _replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Built(out_dir, returns, policy.step, label, note)


def shareable_config(text: str) -> bytes:
    """The run's config.yaml as a model folder shares it: with `logging.runs_root` back at its default, so that
    `rlfoundry train config.yaml` from a download writes under the user's ./runs, not the publisher's path; and a
    `train.init` on the publisher's disk left out (one on the Hub stays: anyone can start from it too)."""
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or not isinstance(data.get("logging"), dict):
        return text.encode()
    data["logging"]["runs_root"] = LoggingConfig.model_fields["runs_root"].default
    train = data.get("train")
    if isinstance(train, dict) and not str(train.get("init") or HF_PREFIX).startswith(HF_PREFIX):
        train["init"] = train["init_checkpoint"] = None
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None).encode()


def _checkpoint_names(source: Path, checkpoint: str | None) -> tuple[str, str | None]:
    """(which checkpoint: last, best or a step directory; its step directory) of a run directory or model folder."""
    if is_model_folder(source):
        marker = json.loads((source / "rlfoundry.json").read_text())  # read once already by load_policy
        return str(marker.get("checkpoint") or "unknown"), marker.get("checkpoint_dir")
    name = checkpoint_name(source, checkpoint)
    return name, ckpt.resolve(source, name).name


def _total_steps(source: Path, cfg) -> int:
    """Env steps the run trained for: its summary's, else the config's budget."""
    try:
        return int(json.loads((source / "summary.json").read_text())["total_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return int(cfg.train.total_timesteps)


def _evaluate(policy: policy_lib.Policy, episodes: int, seed: int) -> tuple[list[float], list[int]]:
    """`episodes` episodes on evaluation envs as the trainer builds them, with the run's frozen statistics."""
    from rlfoundry.run.evaluate import evaluate

    cfg = policy.cfg
    envs, _ = envs_lib.build(cfg.env, cfg.eval.num_envs or min(episodes, 16), evaluation=True)
    try:
        if policy.obs_stats is not None:
            envs_lib.set_obs_stats(envs, *policy.obs_stats)
        torch.manual_seed(seed)  # stochastic evaluation samples with torch
        return evaluate(policy.agent, envs, episodes, seed, cfg.eval.deterministic)
    finally:
        envs.close()


def _record(policy: policy_lib.Policy, path: Path, seed: int) -> str | None:
    """One replay episode as an mp4; the reason when the env cannot render one."""
    from rlfoundry.run.video import record_video

    try:
        envs_lib.check_renders(policy.cfg.env.id)
    except ConfigError as exc:
        return f"no video: {exc}"
    record_video(policy.agent, policy.cfg.env, policy.obs_stats, path, seed, policy.cfg.eval.deterministic)
    return None


def _write_weights(path: Path, policy: policy_lib.Policy) -> None:
    """The networks' tensors only (no optimizer, no collector state), as safetensors."""
    from safetensors.torch import save

    held, _, _ = ckpt.split_agent_state(policy.agent.state_dict())
    weights = network_weights(policy.agent, held, policy.source)
    # contiguous copies: parameters may be views of one flat buffer, which safetensors refuses
    _write(path, save({k: v.detach().cpu().clone(memory_format=torch.contiguous_format) for k, v in weights.items()}))


def _json(data: dict) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode()


def _write(path: Path, data: bytes) -> None:
    with writing(path), open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _replace(tmp: Path, out_dir: Path) -> None:
    """Rename the complete folder into place; an old one is renamed away first and deleted after."""
    if (tmp / VIDEO).exists():  # written by ffmpeg: flushed here, with the others
        with open(tmp / VIDEO, "rb") as f:
            os.fsync(f.fileno())
    old = None
    if out_dir.exists():
        old = out_dir.parent / f".tmp-old-{out_dir.name}-{os.getpid()}"
        os.rename(out_dir, old)
    os.rename(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _version() -> str | None:
    """The installed rlfoundry's version (read from its metadata: the package root sits above this layer)."""
    try:
        return metadata.version("rlfoundry")
    except metadata.PackageNotFoundError:
        return None


def model_card(cfg, results: dict, marker: dict, total_steps: int, has_video: bool) -> str:
    """README.md: the Hub's YAML metadata header, then what the agent is, its score, how to load and reproduce it."""
    env_id, algo = cfg.env.id, cfg.algo.name
    score = f"{results['mean_reward']:.2f} +/- {results['std_reward']:.2f}"
    repo = marker["repo"] or "ORG/NAME"
    name = repo.split("/")[1] if marker["repo"] else default_model_name(cfg)
    env_tag = env_id.replace("/", "-")  # a tag is one word on the Hub; ids such as ALE/Pong-v5 hold a slash
    tags = ["reinforcement-learning", "deep-reinforcement-learning", env_tag, algo, "rlfoundry"]
    if cfg.variant not in tags:
        tags.insert(4, cfg.variant)
    metadata = {
        "library_name": "rlfoundry",
        "tags": tags,
        "model-index": [{
            "name": name,
            "results": [{
                "task": {"type": "reinforcement-learning", "name": "reinforcement-learning"},
                "dataset": {"name": env_id, "type": env_id},
                "metrics": [{"type": "mean_reward", "value": score, "name": "mean_reward", "verified": False}],
            }],
        }],
    }
    header = yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True)
    net = cfg.network
    mode = "deterministic" if results["deterministic"] else "sampled"
    shown = f"{results['mean_reward']:.2f} ± {results['std_reward']:.2f}"
    video = (f"\n`{VIDEO}` shows one episode played the same way (seeded from evaluation seed {results['seed']}).\n"
             if has_video else "")
    return f"""---
{header}---

# {algo.upper()} agent for `{env_id}` (rlfoundry)

A {algo.upper()} agent (preset variant `{cfg.variant}`; network: `{net.encoder}` encoder, `{net.core}` core) trained
with rlfoundry on `{env_id}` for {total_steps:,} env steps, seed {cfg.train.seed}. These are the
weights of its `{marker['checkpoint']}` checkpoint, saved at step {marker['step']:,}.

## Evaluation

Mean return **{shown}** over {results['episodes']} episodes ({mode} actions, evaluation seed {results['seed']}, the
run's frozen observation statistics, true rewards). Every episode's return and length: `{RESULTS}`.
{video}
## Use it

```bash
pip install 'rlfoundry[hub]'
rlfoundry play hf://{repo}                  # watch it
rlfoundry eval hf://{repo} --episodes 10    # evaluate it again
```

```python
import rlfoundry

policy = rlfoundry.load_policy("hf://{repo}")
env = policy.make_env()                     # the run's preprocessing
obs, _ = env.reset(seed=0)
action, state = policy.act(obs)             # normalises observations itself; pass `state` back next step
```

Loading reads YAML, JSON and safetensors only: nothing in this repository is executed.

## Reproduce

`config.yaml` is the run's fully resolved config (seed and package versions included; `logging.runs_root` back at
`runs`). In a download of this repository:

```bash
{REPRODUCE}
```

## Files

| file | what it holds |
| --- | --- |
| `config.yaml` | the resolved config of the run |
| `model.safetensors` | the networks' weights (no optimizer state) |
| `normalization.json` | the observation normalisation statistics (mean, var, count; null when not normalised) |
| `rlfoundry.json` | format marker, checkpoint, step, rlfoundry version, the reproduce command |
| `{RESULTS}` | the evaluation above, episode by episode |
""" + (f"| `{VIDEO}` | one evaluation episode |\n" if has_video else "")


def upload(folder: str | Path, repo: str, private: bool = False, token: str | None = None,
           attempts: int = len(RETRY_DELAYS) + 1) -> str:
    """Create `repo` if needed (private when `private`; an existing repo keeps its visibility) and commit every
    file of `folder` in ONE commit; returns the commit's URL. Transient failures are retried `attempts` times in
    all. Raises ConfigError for a missing or refused token and an unusable folder (nothing is sent then), and
    UploadError when the Hub fails, saying what the repository holds."""
    hub = hub_module()
    check_repo(repo)
    folder = Path(folder)
    check_folder(folder)
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    token = check_token(token)
    marker = json.loads((folder / "rlfoundry.json").read_text())
    message = (f"rlfoundry publish: {marker.get('variant') or marker.get('algo')} on {marker.get('env_id')}, "
               f"step {marker.get('step')}")
    api = hub.HfApi(token=token)
    attempt, unanswered = 0, False  # unanswered: an attempt got no answer, so its commit may have gone in
    while True:
        attempt += 1
        try:
            api.create_repo(repo, private=private or None, exist_ok=True, repo_type="model")
            # fresh operations each attempt: one that took part in a failed commit may hold upload state
            operations = [hub.CommitOperationAdd(path_in_repo=p.name, path_or_fileobj=str(p)) for p in files]
            info = api.create_commit(repo, operations, commit_message=message, repo_type="model")
            return str(getattr(info, "commit_url", None) or f"{api.endpoint}/{repo}")
        except Exception as exc:  # classified below; KeyboardInterrupt passes
            status = getattr(getattr(exc, "response", None), "status_code", None)
            reason = f"{type(exc).__name__}: {_first_line(exc)}"
            unanswered = unanswered or (status is None and _transient(exc, status))
            if status in (401, 403):
                raise ConfigError(f"the Hub refused the token for {repo} (HTTP {status}): it needs write access "
                                  f"to {repo.split('/')[0]}; {HOW_TO_LOGIN}") from None
            if not _transient(exc, status) or attempt >= attempts:
                tries = f" after {attempt} attempts" if attempt > 1 else ""
                state = ("an attempt got no answer: its commit went in whole or not at all; see "
                         f"{api.endpoint}/{repo}/commits" if unanswered else
                         "nothing was committed: the repository holds what it held before (a new one is empty)")
                raise UploadError(f"upload to {repo} failed{tries} ({reason}); {state}. The folder is kept: "
                                  f"rlfoundry publish {folder} --repo {repo} uploads it again") from exc
            time.sleep(RETRY_DELAYS[min(attempt - 1, len(RETRY_DELAYS) - 1)])


HOW_TO_LOGIN = "set HF_TOKEN or run `hf auth login`"
NO_TOKEN = f"no Hugging Face token: {HOW_TO_LOGIN} (a token with write access), or use --dry-run"


def hub_module():
    try:
        import huggingface_hub
    except ImportError:
        raise ConfigError("publishing needs huggingface_hub: pip install 'rlfoundry[hub]'") from None
    return huggingface_hub


def check_token(token: str | None = None) -> str:
    """The token an upload would use (ConfigError when there is none), checked before any work is done."""
    token = token or hub_module().get_token()
    if not token:
        raise ConfigError(NO_TOKEN)
    return token


def check_folder(folder: Path) -> None:
    """A complete model folder that loads (CheckpointError / ConfigError otherwise): nothing broken is uploaded."""
    if not is_model_folder(folder):
        raise ConfigError(f"{folder}: not an rlfoundry model folder (no rlfoundry.json)")
    if not (folder / CARD).is_file():
        raise ConfigError(f"{folder}: no {CARD}: build the folder with `rlfoundry publish RUN --repo ORG/NAME`")
    policy_lib.from_saved(read(folder, None, str(folder)), str(folder))


def _transient(exc: BaseException, status: int | None) -> bool:
    """Worth another try: an HTTP status that says "later", or no answer at all (a connection error, a timeout)."""
    if status is not None:
        return status in RETRY_STATUS
    return isinstance(exc, (OSError, *_transport_errors()))


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection and timeout errors of the HTTP client huggingface_hub uses (httpx2, httpx or requests)."""
    found = []
    for name in ("httpx2", "httpx"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        found.append(module.TransportError)
    return tuple(found)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no message"

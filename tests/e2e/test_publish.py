"""`rlfoundry publish` without a network: the model folder and its card, loading it back (as a folder and as
hf://ORG/NAME, with `snapshot_download` handing over the folder) with the run's own actions, the upload through
huggingface_hub to a local stand-in for the Hub's endpoint, failures mid-upload, and bad input that exits 2."""

from __future__ import annotations

import base64
import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import imageio.v2 as imageio
import numpy as np
import pytest
import typer
import yaml
from typer.testing import CliRunner

import rlfoundry
from rlfoundry import envs as envs_lib
from rlfoundry.cli.publish import publish
from rlfoundry.config.errors import ConfigError
from rlfoundry.hub import MODEL_FILES
from rlfoundry.hub import publish as publish_lib

huggingface_hub = pytest.importorskip("huggingface_hub")
hub_constants = pytest.importorskip("huggingface_hub.constants")

TINY = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "train.total_timesteps=2048",
        "eval.every_steps=1024", "eval.episodes=2"]
# Pendulum with observation normalisation: continuous actions, and statistics that must come back bit for bit
NORMALIZED = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "env.normalize_obs=true",
              "algo.num_steps=128", "algo.minibatch_size=256", "algo.update_epochs=2", "train.total_timesteps=1024",
              "eval.every_steps=512", "eval.episodes=1"]
REPO = "org/ppo-cartpole"
FILES = sorted([*MODEL_FILES, "README.md", "replay.mp4", "results.json"])

app = typer.Typer(pretty_exceptions_enable=False)
app.command("publish")(publish)
app.command("other")(lambda: None)  # a second command, so `publish` is a subcommand as in the real app


def invoke(*args):
    return CliRunner().invoke(app, ["publish", *map(str, args)])


def one_error_line(result, code: int, message: str) -> None:
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("uploading ")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("publish")  # an absolute runs_root, which the published config must not keep
    run_dir, _ = rlfoundry.train("CartPole-v1:ppo", [*TINY, f"logging.runs_root={root / 'runs'}"], root / "run")
    return run_dir


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory) -> Path:
    run_dir, _ = rlfoundry.train("Pendulum-v1:ppo", NORMALIZED, tmp_path_factory.mktemp("publish") / "pendulum")
    return run_dir


@pytest.fixture(scope="module")
def folder(cartpole) -> Path:
    """`publish RUN --dry-run` of the CartPole run, with its video: built once, only read by the tests."""
    result = invoke(cartpole, "--repo", REPO, "--dry-run", "--episodes", 3)
    assert result.exit_code == 0, result.output
    path = cartpole / "publish" / "ppo-cartpole"
    assert result.stdout.splitlines()[1:] == [f"model folder: {path}", "dry run: nothing uploaded"]
    return path


class StandIn(BaseHTTPRequestHandler):
    """The Hub endpoints an upload calls, on 127.0.0.1: create a repository, validate the card's YAML, preupload
    (every file answered "regular": its bytes go inline in the commit) and the commit, read back file by file.
    `hub.fail` lists what the next commit requests get instead: an HTTP status, or "hang up" (no answer)."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self.answer(404, {"error": "not in the stand-in"})

    def do_POST(self) -> None:
        hub = self.server.hub
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        hub.requests.append((self.path, self.headers.get("authorization")))
        if self.path == "/api/repos/create":
            if hub.refuse:
                return self.answer(hub.refuse, {"error": "Invalid credentials in Authorization header"})
            hub.created.append(json.loads(body))
            return self.answer(200, {"url": f"{hub.url}/{hub.created[-1]['organization']}/{hub.created[-1]['name']}"})
        if self.path == "/api/validate-yaml":
            return self.answer(200, {})
        if "/preupload/" in self.path:
            files = json.loads(body)["files"]
            return self.answer(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                               for f in files]})
        if "/commit/" in self.path:
            if hub.fail:
                failure = hub.fail.pop(0)
                if failure == "hang up":
                    self.close_connection = True
                    return None
                return self.answer(failure, {"error": "try again later"})
            lines = [json.loads(line) for line in body.splitlines()]
            hub.commits.append({line["value"]["path"]: base64.b64decode(line["value"]["content"])
                                for line in lines if line["key"] == "file"})
            hub.messages.append(lines[0]["value"]["summary"])
            repo = "/".join(self.path.split("/")[3:5])  # /api/models/ORG/NAME/commit/main
            return self.answer(200, {"commitUrl": f"{hub.url}/{repo}/commit/{'a' * 40}",
                                     "commitOid": "a" * 40})
        return self.answer(404, {"error": "not in the stand-in"})

    def answer(self, status: int, data: dict) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def hub(monkeypatch):
    """A local stand-in for the Hub endpoint; the real huggingface_hub HfApi talks to it over HTTP."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    server.hub = SimpleNamespace(url=f"http://127.0.0.1:{server.server_port}", requests=[], created=[], commits=[],
                                 messages=[], fail=[], refuse=None)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)  # quick to shut down
    thread.start()
    monkeypatch.setattr(hub_constants, "ENDPOINT", server.hub.url)
    monkeypatch.setattr(publish_lib, "RETRY_DELAYS", (0.0, 0.0))
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    yield server.hub
    server.shutdown()
    server.server_close()


def observations(policy, count: int = 300) -> np.ndarray:
    """Observations of random play in the run's env."""
    env = policy.make_env()
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    seen = []
    for _ in range(count):
        seen.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return np.stack(seen)


# ---------------------------------------------------------------- the folder


def test_folder_holds_the_model_files_and_a_card_the_hub_reads(folder, cartpole):
    assert sorted(p.name for p in folder.iterdir()) == FILES
    assert not list(folder.parent.glob(".tmp-*"))
    results = json.loads((folder / "results.json").read_text())
    assert results["episodes"] == len(results["returns"]) == 3 and results["seed"] == 1 + 10000
    assert results["mean_reward"] == pytest.approx(np.mean(results["returns"]))
    score = f"{results['mean_reward']:.2f} +/- {results['std_reward']:.2f}"

    metadata = huggingface_hub.metadata_load(folder / "README.md")
    assert metadata["library_name"] == "rlfoundry"
    assert metadata["tags"] == ["reinforcement-learning", "deep-reinforcement-learning", "CartPole-v1", "ppo",
                                "rlfoundry"]
    card = huggingface_hub.ModelCard.load(folder / "README.md")
    [result] = card.data.eval_results
    assert (result.task_type, result.dataset_type, result.dataset_name) == ("reinforcement-learning", "CartPole-v1",
                                                                            "CartPole-v1")
    assert (result.metric_type, result.metric_value) == ("mean_reward", score)
    assert card.data.model_name == "ppo-cartpole"
    assert f'rlfoundry.load_policy("hf://{REPO}")' in card.text and f"rlfoundry play hf://{REPO}" in card.text
    assert "rlfoundry train config.yaml" in card.text

    best = json.loads((cartpole / "checkpoints" / "best.json").read_text())
    marker = json.loads((folder / "rlfoundry.json").read_text())
    assert marker["format"] == "rlfoundry-model" and marker["version"] == 1 and marker["repo"] == REPO
    assert (marker["checkpoint"], marker["checkpoint_dir"], marker["step"]) == ("best", best["step_dir"], best["step"])
    assert marker["reproduce"] == "rlfoundry train config.yaml" and marker["rlfoundry_version"] == rlfoundry.__version__
    published, own = (yaml.safe_load((path / "config.yaml").read_text()) for path in (folder, cartpole))
    assert published["logging"].pop("runs_root") == "runs" and own["logging"].pop("runs_root").startswith("/")
    assert published == own  # the rest as the run resolved it
    assert json.loads((folder / "normalization.json").read_text())["mean"] is None

    from safetensors import safe_open

    with safe_open(folder / "model.safetensors", "pt") as weights:
        names = list(weights.keys())
    assert names and all(name.startswith("policy.") for name in names)  # no collector state, no optimizer
    with imageio.get_reader(folder / "replay.mp4", format="FFMPEG") as reader:
        assert sum(1 for _ in reader) >= 2


def test_round_trip_gives_the_runs_actions(folder, cartpole):
    """The folder loads with the same safe loaders and acts as the run's own checkpoint does."""
    ours, theirs = rlfoundry.load_policy(cartpole, "best"), rlfoundry.load_policy(folder)
    obs = observations(ours)
    assert theirs.step == ours.step and theirs.obs_stats is None
    np.testing.assert_array_equal(theirs.act(obs)[0], ours.act(obs)[0])
    assert [int(theirs.act(o)[0]) for o in obs[:20]] == [int(ours.act(o)[0]) for o in obs[:20]]


def test_round_trip_with_observation_normalisation(pendulum, tmp_path):
    out = tmp_path / "model"
    result = invoke(pendulum, "--repo", "org/ppo-pendulum", "--dry-run", "--out", out, "--episodes", 1,
                    "--no-video", "--checkpoint", "last")
    assert result.exit_code == 0, result.output
    assert result.stderr == "" and not (out / "replay.mp4").exists()
    ours, theirs = rlfoundry.load_policy(pendulum, "last"), rlfoundry.load_policy(out)
    for mine, loaded in zip(ours.obs_stats, theirs.obs_stats, strict=True):  # bit for bit, dtype included
        assert np.asarray(loaded).dtype == np.asarray(mine).dtype and np.array_equal(loaded, mine)
    obs = observations(ours)
    actions = theirs.act(obs)[0]
    assert actions.shape == (len(obs), 1)
    np.testing.assert_array_equal(actions, ours.act(obs)[0])


def test_hf_url_downloads_the_model_files_and_loads_them(folder, cartpole, monkeypatch):
    asked = []

    def snapshot_download(repo_id, **kwargs):
        asked.append((repo_id, kwargs))
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    policy = rlfoundry.load_policy(f"hf://{REPO}@v1")
    assert asked == [(REPO, {"revision": "v1", "allow_patterns": list(MODEL_FILES)})]
    obs = observations(policy, 100)
    np.testing.assert_array_equal(policy.act(obs)[0], rlfoundry.load_policy(cartpole, "best").act(obs)[0])


def test_a_run_fine_tunes_from_a_model_folder_and_from_the_hub(folder, cartpole, tmp_path, monkeypatch):
    """`train.init` takes what `load_policy` takes: the networks of a folder or of hf://ORG/NAME (pinned to the
    commit the cache holds), which act as the run's own; a config shared from such a run keeps the Hub source."""
    snapshot = tmp_path / "hub" / "snapshots" / ("c0ffee" * 6 + "c0ff")  # the cache names a snapshot by its commit
    shutil.copytree(folder, snapshot)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kwargs: str(snapshot))
    frozen = [*TINY, "algo.lr=1e-12", "train.total_timesteps=256", "eval.every_steps=0",
              f"logging.runs_root={tmp_path}"]
    obs = observations(rlfoundry.load_policy(cartpole, "best"))
    for name, init in (("from-folder", folder), ("from-hub", f"hf://{REPO}")):
        run_dir, _ = rlfoundry.train("CartPole-v1:ppo", [*frozen, f"train.init={init}"], tmp_path / name)
        np.testing.assert_array_equal(rlfoundry.load_policy(run_dir, "last").act(obs)[0],
                                      rlfoundry.load_policy(cartpole, "best").act(obs)[0])
    config = yaml.safe_load((tmp_path / "from-hub" / "config.yaml").read_text())
    assert config["train"]["init"] == f"hf://{REPO}@{snapshot.name}" and config["train"]["init_checkpoint"] is None
    shared = yaml.safe_load(publish_lib.shareable_config((tmp_path / "from-hub" / "config.yaml").read_text()))
    assert shared["train"]["init"] == config["train"]["init"]
    local = yaml.safe_load(publish_lib.shareable_config((tmp_path / "from-folder" / "config.yaml").read_text()))
    assert local["train"]["init"] is None  # the publisher's path means nothing on another machine


def test_publish_of_an_hf_model_builds_a_new_folder(folder, tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kwargs: str(folder))
    out = tmp_path / "copy"
    result = invoke(f"hf://{REPO}", "--repo", "org/copy", "--dry-run", "--out", out, "--episodes", 1, "--no-video")
    assert result.exit_code == 0, result.output
    marker = json.loads((out / "rlfoundry.json").read_text())
    assert (marker["repo"], marker["checkpoint"]) == ("org/copy", "best")
    assert (out / "model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()


def test_a_failed_build_leaves_no_folder_and_keeps_the_old_one(cartpole, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("killed while writing the card")

    monkeypatch.setattr(publish_lib, "model_card", broken)
    out = tmp_path / "model"
    with pytest.raises(RuntimeError):
        publish_lib.build_folder(cartpole, out, episodes=1, video=False, repo=REPO)
    assert list(tmp_path.iterdir()) == []  # neither the folder nor its temporary directory
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(RuntimeError):
        publish_lib.build_folder(cartpole, out, episodes=1, video=False, repo=REPO, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["model"] and (out / "mine.txt").read_text() == "keep"


def test_existing_folder_is_replaced_only_when_asked(cartpole, tmp_path, monkeypatch):
    out = tmp_path / "model"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    result = invoke(cartpole, "--repo", REPO, "--dry-run", "--out", out, "--episodes", 1, "--no-video")
    one_error_line(result, 2, f"{out} exists and is not an empty folder (--overwrite replaces it; a folder built "
                              f"before is uploaded as it is by `rlfoundry publish {out} --repo ORG/NAME`)")
    assert [p.name for p in out.iterdir()] == ["mine.txt"]

    def no_rgb_array(env_id, purpose="cannot record a video"):
        raise ConfigError(f"env.id = '{env_id}': {purpose}: the env renders ['ansi']")

    monkeypatch.setattr(envs_lib, "check_renders", no_rgb_array)
    result = invoke(cartpole, "--repo", REPO, "--dry-run", "--out", out, "--episodes", 1, "--overwrite",
                    "--checkpoint", 1024)
    assert result.exit_code == 0, result.output
    assert "(checkpoint step_000000001024, step 1,024)" in result.stdout
    assert "note: no video: env.id = 'CartPole-v1': cannot record a video" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(set(FILES) - {"replay.mp4"})
    assert "replay.mp4" not in (out / "README.md").read_text()


# ---------------------------------------------------------------- the upload


def commits(hub) -> list[str]:
    return [path for path, _ in hub.requests if "/commit/" in path]


def test_upload_is_one_commit_of_every_file(folder, hub):
    result = invoke(folder, "--repo", REPO, "--private")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [f"model folder: {folder} (built before: checked, not rebuilt)",
                                          f"uploaded: {hub.url}/{REPO}/commit/{'a' * 40}"]
    [created] = hub.created
    assert (created["organization"], created["name"], created["type"]) == ("org", "ppo-cartpole", "model")
    assert created.get("visibility") == "private" or created.get("private") is True  # newer clients: visibility
    assert {token for _, token in hub.requests} == {"Bearer hf_test_token"}
    assert commits(hub) == [f"/api/models/{REPO}/commit/main"]
    [files] = hub.commits
    assert sorted(files) == FILES and all(data == (folder / name).read_bytes() for name, data in files.items())
    assert hub.messages == [f"rlfoundry publish: ppo on CartPole-v1, step {json.loads((folder / 'rlfoundry.json').read_text())['step']}"]


def test_publish_from_a_run_builds_then_uploads(cartpole, tmp_path, hub):
    out = tmp_path / "model"
    result = invoke(cartpole, "--repo", "org/other", "--out", out, "--episodes", 1, "--no-video")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == f"uploaded: {hub.url}/org/other/commit/{'a' * 40}"
    assert not {"private", "visibility"} & set(hub.created[0])  # without --private: the Hub's (or the org's) default
    [files] = hub.commits
    assert sorted(files) == sorted(p.name for p in out.iterdir())


def test_a_transient_failure_is_retried(folder, hub):
    hub.fail += [503, "hang up"]
    result = invoke(folder, "--repo", REPO)
    assert result.exit_code == 0, result.output
    assert len(commits(hub)) == 3 and len(hub.commits) == 1 and sorted(hub.commits[0]) == FILES


NOTHING = "nothing was committed: the repository holds what it held before (a new one is empty)"
FAILURES = {
    "server keeps failing": ([503] * 3, 1, 3, "failed after 3 attempts (HfHubHTTPError: Server error '503 Service Unavailable'"),
    "no answer": (["hang up", 503, 503], 1, 3, "an attempt got no answer: its commit went in whole or not at all; "
                                               f"see {{url}}/{REPO}/commits"),
    "refused": ([422], 1, 1, "failed (HfHubHTTPError: "),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_a_failed_upload_says_what_the_repository_holds(folder, hub, case):
    failures, code, attempts, message = FAILURES[case]
    hub.fail += failures
    result = invoke(folder, "--repo", REPO)
    one_error_line(result, code, message.format(url=hub.url))
    if case != "no answer":
        assert NOTHING in result.stderr
    assert len(commits(hub)) == attempts and hub.commits == [] and "uploaded:" not in result.stdout
    assert f"The folder is kept: rlfoundry publish {folder} --repo {REPO} uploads it again" in result.stderr
    assert sorted(p.name for p in folder.iterdir()) == FILES


def test_a_refused_token_exits_2(folder, hub):
    hub.refuse = 401
    result = invoke(folder, "--repo", REPO)
    one_error_line(result, 2, f"the Hub refused the token for {REPO} (HTTP 401): it needs write access to org; "
                              "set HF_TOKEN or run `hf auth login`")
    assert commits(hub) == [] and len(hub.requests) == 1  # not retried


def test_no_token_exits_2_before_any_work(cartpole, tmp_path, hub, monkeypatch):
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(hub_constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    out = tmp_path / "model"
    result = invoke(cartpole, "--repo", REPO, "--out", out)
    one_error_line(result, 2, "no Hugging Face token: set HF_TOKEN or run `hf auth login`")
    assert not out.exists() and hub.requests == []


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("repo", ["ppo-cartpole", "org/name/extra", "-org/name", "org/name.", "org/a--b",
                                  "org/" + "x" * 97, "org/na me"])
def test_bad_repo_exits_2(cartpole, repo):
    result = invoke(cartpole, "--repo", repo, "--dry-run")
    one_error_line(result, 2, f"--repo {repo!r}: expected ORG/NAME")
    assert {p.name for p in (cartpole / "publish").glob("*")} <= {"ppo-cartpole"}  # the dry run's, if made


def _truncate_weights(path: Path) -> None:
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])


CORRUPT = {
    "truncated weights": (_truncate_weights, "model.safetensors: corrupt or truncated"),
    "unreadable rlfoundry.json": (lambda p: (p / "rlfoundry.json").write_text("{oops"), "rlfoundry.json: unreadable"),
    "foreign rlfoundry.json": (lambda p: (p / "rlfoundry.json").write_text('{"format": "other"}'),
                               "not an rlfoundry model folder"),
    "bad statistics": (lambda p: (p / "normalization.json").write_text('{"mean": [1], "shape": [1]}'),
                       "normalization.json is malformed"),
}


@pytest.mark.parametrize("built", [True, False], ids=["upload as is", "build from it"])
@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_corrupt_model_folder_exits_2(folder, tmp_path, hub, case, built):
    """A built folder is checked before it is uploaded; a model folder without a card is loaded to build one."""
    damage, message = CORRUPT[case]
    copy = Path(shutil.copytree(folder, tmp_path / "model"))
    damage(copy)
    if not built:
        (copy / "README.md").unlink()
    result = invoke(copy, "--repo", REPO, *([] if built else ["--out", tmp_path / "out", "--episodes", 1]))
    one_error_line(result, 2, message)
    assert hub.requests == [] and not (tmp_path / "out").exists()


def test_a_built_folder_is_uploaded_only_to_its_own_repo(folder, hub):
    result = invoke(folder, "--repo", "org/elsewhere")
    one_error_line(result, 2, f"was built for {REPO} (its card names that repository)")
    result = invoke(folder, "--repo", REPO, "--episodes", 5)
    one_error_line(result, 2, "--episodes apply when building one from a run")
    assert hub.requests == []


def test_eval_and_play_take_an_hf_model(folder, tmp_path, monkeypatch):
    """hf://ORG/NAME wherever a run is accepted: eval prints the folder's return, play writes its videos under
    ./videos (the Hub's cache is not written into)."""
    from rlfoundry.cli.eval import evaluate_run
    from rlfoundry.cli.play import play

    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kwargs: str(folder))
    monkeypatch.chdir(tmp_path)
    commands = typer.Typer(pretty_exceptions_enable=False)
    commands.command("eval")(evaluate_run)
    commands.command("play")(play)
    evaluated = CliRunner().invoke(commands, ["eval", f"hf://{REPO}", "--episodes", "2"])
    assert evaluated.exit_code == 0, evaluated.output
    step = json.loads((folder / "rlfoundry.json").read_text())["step"]
    assert evaluated.stdout.startswith("evaluation return: ") and f"(checkpoint best, step {step:,})" in evaluated.stdout
    played = CliRunner().invoke(commands, ["play", f"hf://{REPO}", "--render", "video", "--episodes", "1"])
    assert played.exit_code == 0, played.output
    assert f"from hf://{REPO}" in played.stdout
    assert (tmp_path / "videos" / f"play_step{step}_ep0.mp4").stat().st_size > 0
    assert not list(folder.glob("videos"))

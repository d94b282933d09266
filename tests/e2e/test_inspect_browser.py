"""`rlfoundry inspect RUN` in a real browser: the command serves the page on 127.0.0.1, headless Chromium (the
system's, driven by Playwright) runs an episode, moves the slider and presses the right arrow key, and the values
the page shows are those of the agent's own networks at that step, replayed here with the same seed. A screenshot
goes to the test's temporary directory.

The browser is Debian's `chromium` package at /usr/bin/chromium (`make install` installs it where apt-get can):
Playwright's own browser download is not possible on the machines this runs on.
"""

from __future__ import annotations

import csv
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from typer.testing import CliRunner

import rlfoundry
from rlfoundry.cli.inspect import inspect
from rlfoundry.envs import env_seed
from tests.conftest import output_of

CHROMIUM = Path("/usr/bin/chromium")
TINY = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "train.total_timesteps=2048",
        "eval.every_steps=1024", "eval.episodes=2"]
SEED = 3
STEP = 6  # the slider goes here, then the right arrow key one further
TIMEOUT_MS = 30_000

app = typer.Typer(pretty_exceptions_enable=False)
app.command("inspect")(inspect)
app.command("other")(lambda: None)  # a second command, so `inspect` is a subcommand as in the real app


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run_dir, _ = rlfoundry.train("CartPole-v1:ppo", TINY, tmp_path_factory.mktemp("inspect") / "run")
    return run_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shown(tab, name: str) -> str:
    return tab.locator(f"#inspect-{name} textarea").input_value()


def wait_for_step(tab, step: int, length: int) -> None:
    tab.wait_for_function("(want) => document.querySelector('#inspect-at textarea')?.value === want",
                          arg=f"{step} of {length - 1}", timeout=TIMEOUT_MS)


def agent_at(run_dir: Path, seed: int, step: int):
    """(action, value, reward) of the run's default checkpoint at `step` of the greedy episode reset with `seed`:
    `policy.act` and the value head called directly."""
    policy = rlfoundry.load_policy(run_dir)
    env = policy.make_env()
    obs, _ = env.reset(seed=env_seed(seed))
    for _ in range(step):
        action, _ = policy.act(obs)
        obs, *_ = env.step(action)
    action, _ = policy.act(obs)
    _, reward, *_ = env.step(action)
    env.close()
    with torch.no_grad():
        value = policy.agent.policy.value(torch.as_tensor(policy.normalize(obs[None]), dtype=torch.float32))
    return int(action), float(value[0]), float(reward)


@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM}: install Debian's chromium package "
                                                  "(make install does where apt-get can)")
def test_inspector_page_in_headless_chromium(trained, tmp_path, one_thread):
    from playwright.sync_api import sync_playwright

    port = free_port()
    env = {**os.environ, "GRADIO_TEMP_DIR": str(tmp_path / "gradio")}  # Gradio's served files stay in the test's dir
    server = subprocess.Popen([sys.executable, "-m", "rlfoundry.cli", "inspect", str(trained), "--port", str(port)],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        assert line.startswith(f"inspecting {trained} at http://127.0.0.1:{port}"), line + output_of(server)
        url = line.split(" at ")[1].split()[0]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
            try:
                tab = browser.new_page(viewport={"width": 1400, "height": 1100})
                tab.set_default_timeout(TIMEOUT_MS)
                tab.goto(url)
                assert tab.locator("#inspect-host-warning").count() == 0  # local: no warning
                tab.locator("#inspect-seed input").fill(str(SEED))
                tab.click("#inspect-run")
                tab.wait_for_function("() => /^0 of \\d+$/.test(document.querySelector('#inspect-at textarea')?.value)")
                length = int(shown(tab, "at").split(" of ")[1]) + 1
                page_at_0 = {name: shown(tab, name) for name in ("action", "value")}
                assert length > STEP + 1, f"the tiny agent's episode is too short ({length} steps)"
                assert "seed 3" in tab.locator("#inspect-summary").inner_text()

                number = tab.locator("#inspect-step input[type=number]")  # the slider's own number box
                number.fill(str(STEP))
                number.press("Enter")
                wait_for_step(tab, STEP, length)
                number.blur()  # the arrow keys step the episode when no field has the focus
                tab.keyboard.press("ArrowRight")
                wait_for_step(tab, STEP + 1, length)
                page_values = {name: shown(tab, name) for name in ("action", "value", "reward", "memory")}
                assert tab.locator("#inspect-frame img").count() == 1
                assert tab.locator("#inspect-curves img").count() == 1 and tab.locator("#inspect-dist img").count() == 1
                tab.screenshot(path=str(tmp_path / "inspect.png"), full_page=True)

                with tab.expect_download() as download:
                    tab.click("#inspect-csv")
                rows = list(csv.DictReader(open(download.value.path())))

                # the CSV opens again as a recorded episode (without frames), at its first step
                recorded = tmp_path / "recorded.csv"
                download.value.save_as(recorded)
                with tab.expect_file_chooser() as chooser:
                    tab.click("#inspect-open")
                chooser.value.set_files(str(recorded))
                tab.wait_for_function("() => document.querySelector('#inspect-summary')?.innerText.includes('recorded.csv')")
                wait_for_step(tab, 0, length)
                assert shown(tab, "value") == page_at_0["value"] and shown(tab, "action") == page_at_0["action"]
                assert tab.locator("#inspect-frame img").count() == 0
            finally:
                browser.close()
    finally:
        server.send_signal(signal.SIGINT)  # Ctrl-C stops the server
        try:
            assert server.wait(timeout=20) == 0, output_of(server)
        finally:
            if server.poll() is None:
                server.kill()

    action, value, reward = agent_at(trained, SEED, STEP + 1)
    assert int(page_values["action"]) == action
    assert float(page_values["value"]) == pytest.approx(value, rel=1e-6, abs=1e-6)  # 7 significant digits shown
    assert float(page_values["reward"]) == reward == 1.0
    assert page_values["memory"] == "—"  # a feed-forward policy has no memory
    assert (tmp_path / "inspect.png").stat().st_size > 10_000
    assert len(rows) == length
    assert int(rows[STEP + 1]["action"]) == action
    assert float(rows[STEP + 1]["value"]) == pytest.approx(value, rel=1e-6)
    gamma = rlfoundry.load_policy(trained).cfg.algo.gamma
    np.testing.assert_allclose(float(rows[0]["return_to_go"]), sum(gamma ** t for t in range(length)))


def test_inspect_bad_run_exits_2_with_one_line(tmp_path):
    result = CliRunner().invoke(app, ["inspect", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {tmp_path / 'missing'}: no such run directory or model folder"
    assert result.stdout == ""


def test_inspect_bad_checkpoint_exits_2(trained):
    result = CliRunner().invoke(app, ["inspect", str(trained), "--checkpoint", "step_9"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --checkpoint step_9: allowed: best, last, step_")


@pytest.mark.parametrize("host, says", [("300.1.1.1", "not an address, nor a name"),
                                         ("192.0.2.1", "not an address of this machine")])  # TEST-NET-1: nobody's
def test_a_host_this_machine_cannot_serve_on_exits_2_saying_so(trained, host, says):
    result = CliRunner().invoke(app, ["inspect", str(trained), "--host", host])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: --host {host}: {says}") and "port" not in result.stderr


def test_a_non_local_host_is_said_on_the_page(trained):
    from rlfoundry.inspect.app import Inspector, build_page

    local = build_page(Inspector(trained), "127.0.0.1").config
    exposed = build_page(Inspector(trained), "0.0.0.0").config
    ids = lambda config: [c["props"].get("elem_id") for c in config["components"]]  # noqa: E731
    assert "inspect-host-warning" not in ids(local)
    warning = next(c for c in exposed["components"] if c["props"].get("elem_id") == "inspect-host-warning")
    assert "other machines can reach it" in warning["props"]["value"]

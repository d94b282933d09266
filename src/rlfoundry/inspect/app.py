"""The episode inspector page (`rlfoundry inspect RUN`): a Gradio Blocks page over `record_episode`.

Pick a checkpoint of the RUN and a seed and run an episode (or open a CSV the page exported before), then step
through it with the slider, the ◀ ▶ buttons or the left and right arrow keys: the frame (or the observation as a
labelled table), the action, the action distribution (a bar chart, or the Gaussian's mean ± std), the value estimate,
the reward, the return-to-go, the advantage, the memory norm of a memory core, and value, reward and return-to-go
over the episode with a cursor at the step. The episode downloads as mp4 and CSV.

The RUN is loaded with `rlfoundry.load_policy` (a run directory, `@last`, a model folder, `hf://ORG/NAME`): YAML,
safetensors and JSON only, nothing executed. The page binds to 127.0.0.1 unless `--host` names another address, and
then says on the page that other machines can reach it. Gradio's analytics are off and no share link is made.

Every value element has an `elem_id` (inspect-action, inspect-value, inspect-reward, inspect-return,
inspect-advantage, inspect-memory, inspect-at), which the browser test reads.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import numpy as np

from rlfoundry.config.errors import ConfigError
from rlfoundry.hub import is_model_folder, load_policy, local_path
from rlfoundry.inspect.episode import Episode, read_csv, record_episode, write_csv, write_mp4
from rlfoundry.trained.policy import Policy

DEFAULT_HOST = "127.0.0.1"
DEFAULT_MAX_STEPS = 10_000
MODEL = "model"  # the one checkpoint of a published model folder
BLANK = "—"  # what a value element shows where the agent has no such output

# Left and right arrow keys click the ◀ ▶ buttons, except while typing in a field (a focused slider moves itself).
KEYS_JS = """
() => {
  document.addEventListener("keydown", (event) => {
    const target = event.target;
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    if (target && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName))) return;
    const id = {ArrowLeft: "inspect-prev", ArrowRight: "inspect-next"}[event.key];
    const button = id && document.getElementById(id);
    if (button) {
      event.preventDefault();
      button.click();
    }
  });
}
"""

# The ▶ button: one step on, up to the slider's maximum (the episode's last step).
NEXT_JS = "(t) => Math.min(Number(t) + 1, Number(document.querySelector('#inspect-step input[type=range]').max))"


def is_local(host: str) -> bool:
    """Whether only this machine can reach `host`: a loopback address or localhost."""
    return host in ("localhost", "::1") or host.startswith("127.")


def gradio():
    """gradio, imported with its analytics off (the variable is read at import and at launch)."""
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    try:
        import gradio as gr
    except ImportError:
        raise ConfigError("rlfoundry inspect needs gradio: pip install 'rlfoundry[inspect]'") from None
    return gr


def checkpoint_choices(path: Path) -> list[str]:
    """A run directory's checkpoints (best, last, then the step directories), or a model folder's one."""
    if is_model_folder(path):
        return [MODEL]
    root = Path(path) / "checkpoints"
    names = [name for name in ("best", "last") if (root / f"{name}.json").is_file()]
    return names + sorted(p.name for p in root.glob("step_*") if p.is_dir())


class Inspector:
    """What the page serves: a RUN's checkpoints, each loaded on first use with `rlfoundry.load_policy`, and the
    episodes' exported files (in a temporary directory removed when the process ends)."""

    def __init__(self, run: str | Path, checkpoint: str | None = None, runs_root: str | Path = "runs"):
        self.name = str(run)
        self.path = local_path(run, runs_root)  # `@last` and hf:// resolved once
        self.choices = checkpoint_choices(self.path)
        if not self.choices:
            raise ConfigError(f"{run}: no checkpoints in {self.path / 'checkpoints'}")
        if is_model_folder(self.path) and checkpoint in ("best", "last"):
            checkpoint = MODEL
        if checkpoint is not None and checkpoint not in self.choices:
            raise ConfigError(f"--checkpoint {checkpoint}: allowed: {', '.join(self.choices)}")
        self.default = checkpoint or self.choices[0]
        self.policies: dict[str, Policy] = {}
        self.lock = threading.Lock()
        self.first = self.policy(self.default)  # a bad RUN fails here, before any server starts
        self.files = tempfile.TemporaryDirectory(prefix="rlfoundry-inspect-")
        self.count = 0

    def policy(self, checkpoint: str) -> Policy:
        if checkpoint not in self.choices:
            raise ConfigError(f"checkpoint {checkpoint!r}: allowed: {', '.join(self.choices)}")
        with self.lock:
            if checkpoint not in self.policies:
                self.policies[checkpoint] = load_policy(self.path, None if checkpoint == MODEL else checkpoint)
            return self.policies[checkpoint]

    def torch_threads(self) -> int:
        """The threads a run of this network would act with (`train.torch_threads`; auto: 1 for small MLPs, where
        more threads only wait on each other for one observation at a time)."""
        from rlfoundry.run import hardware

        cfg = self.first.cfg
        return hardware.resolve_threads(cfg.train.torch_threads, cfg.network, hardware.detect())

    def record(self, checkpoint: str, seed: int, max_steps: int) -> tuple[Episode, Path, Path | None]:
        """An episode and its CSV and mp4 (None without frames)."""
        policy = self.policy(checkpoint)
        episode = record_episode(policy, seed, max_steps)
        episode.source = f"checkpoint {checkpoint} (step {policy.step:,})"
        with self.lock:
            self.count += 1
            folder = Path(self.files.name) / f"episode{self.count}"
        folder.mkdir()
        stem = f"{episode.env_id.replace('/', '-')}_{checkpoint}_seed{seed}"  # ALE/Pong-v5, dm_control/...
        csv_path = write_csv(episode, folder / f"{stem}.csv")
        mp4_path = write_mp4(episode, folder / f"{stem}.mp4") if episode.frames is not None else None
        return episode, csv_path, mp4_path


# ---------------------------------------------------------------- what the page shows


def number(value: float | None) -> str:
    return BLANK if value is None or not np.isfinite(value) else f"{value:.7g}"


def action_text(action: np.ndarray) -> str:
    action = np.asarray(action)
    if action.ndim == 0:
        return str(int(action)) if np.issubdtype(action.dtype, np.integer) else number(float(action))
    return "[" + ", ".join(number(float(x)) for x in action.ravel()) + "]"


def at(values: np.ndarray | None, t: int) -> float | None:
    return None if values is None else float(values[t])


def summary(episode: Episode) -> str:
    how = "ended by the env" if episode.ended else "cut short by max steps"
    seed = "" if episode.seed is None else f" · seed {episode.seed}"
    discounted = "" if not np.isfinite(episode.gamma) else f" · γ = {episode.gamma:g}"
    return (f"**{episode.source}**{seed} · {episode.length} steps ({how}) · return "
            f"{float(np.sum(episode.rewards)):.6g}{discounted}")


def distribution_figure(episode: Episode, t: int):
    """A bar chart of π(·|o_t) or Q(o_t, ·), or the Gaussian's mean ± std per action dimension; None without one."""
    from matplotlib.figure import Figure

    bars = next(((table, label) for table, label in ((episode.probs, "probability"), (episode.q_values, "Q-value"))
                 if table is not None), None)
    if bars is None and episode.means is None:
        return None
    figure = Figure(figsize=(5, 2.6), layout="constrained")
    axes = figure.add_subplot()
    if bars is not None:
        table, label = bars
        colors = ["tab:blue"] * table.shape[1]
        if episode.actions.ndim == 1:  # the action taken, highlighted
            colors[int(episode.actions[t])] = "tab:orange"
        axes.bar(np.arange(table.shape[1]), table[t], color=colors)
        axes.set_xticks(np.arange(table.shape[1]))
        axes.set_xlabel("action")
        axes.set_ylabel(label)
        axes.set_title(f"{'π(·|o)' if label == 'probability' else 'Q(o, ·)'} at step {t}; the action taken in orange",
                       fontsize="small")
    else:
        means, stds = episode.means, episode.stds
        assert means is not None and stds is not None, "a Gaussian policy's episode records both"
        dims = np.arange(means.shape[1])
        axes.errorbar(dims, means[t], yerr=stds[t], fmt="o", capsize=4, label="mean ± std")
        if episode.actions.ndim == 2:
            axes.plot(dims, episode.actions[t], "x", color="tab:orange", label="action taken")
        axes.set_xticks(dims)
        axes.set_xlabel("action dimension")
        axes.set_title(f"the Gaussian at step {t}", fontsize="small")
        axes.legend(fontsize="small")
    return figure


def curves_figure(episode: Episode, t: int):
    """Value, reward and return-to-go over the episode, with a cursor at step t."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 2.8), layout="constrained")
    axes = figure.add_subplot()
    steps = np.arange(episode.length)
    axes.plot(steps, episode.rewards, label="reward", drawstyle="steps-mid")
    axes.plot(steps, episode.returns, label="return-to-go")
    if episode.values is not None:
        axes.plot(steps, episode.values, label="value")
    axes.axvline(t, color="black", linewidth=1)
    discounted = f" (γ = {episode.gamma:g})" if np.isfinite(episode.gamma) else ""
    axes.set_title(f"over the episode{discounted}, step {t} marked", fontsize="small")
    axes.set_xlabel("step")
    axes.legend(fontsize="small", loc="best")
    return figure


def build_page(inspector: Inspector, host: str = DEFAULT_HOST):
    """The Blocks page (not launched)."""
    gr = gradio()
    first = inspector.first
    core = first.cfg.network.core
    described = f"{first.cfg.env.id} · {first.cfg.algo.name}" + ("" if core == "identity" else f" · {core} core")

    # delete_cache: the frames, plots and downloads Gradio serves from its cache are removed after an hour
    with gr.Blocks(title=f"rlfoundry inspect · {inspector.name}", analytics_enabled=False,
                   delete_cache=(3600, 3600)) as page:
        gr.Markdown(f"## rlfoundry inspect · `{inspector.name}`\n{described}")
        if not is_local(host):
            gr.Markdown(f"⚠️ **This page is served on `{host}`: other machines can reach it** (chosen with `--host`). "
                        "Anyone who reaches it can run episodes of this policy and download them. Without `--host` "
                        f"it binds to {DEFAULT_HOST}, this machine only.", elem_id="inspect-host-warning")
        episode_state = gr.State(None)
        with gr.Row(equal_height=True):
            checkpoint = gr.Dropdown(inspector.choices, value=inspector.default, label="Checkpoint",
                                     elem_id="inspect-checkpoint")
            seed = gr.Number(0, precision=0, minimum=0, label="Seed", elem_id="inspect-seed")
            max_steps = gr.Number(DEFAULT_MAX_STEPS, precision=0, minimum=1, label="Max steps",
                                  elem_id="inspect-max-steps")
            run = gr.Button("Run episode", variant="primary", elem_id="inspect-run")
            recorded = gr.UploadButton("Open a recorded CSV", file_types=[".csv"], type="filepath",
                                       elem_id="inspect-open")
        status = gr.Markdown("Pick a checkpoint and a seed, then run an episode.", elem_id="inspect-summary")
        with gr.Row(equal_height=True):
            previous = gr.Button("◀", elem_id="inspect-prev", scale=0, min_width=60)
            step = gr.Slider(0, 1, value=0, step=1, label="Step (← → keys)", elem_id="inspect-step")
            following = gr.Button("▶", elem_id="inspect-next", scale=0, min_width=60)
        with gr.Row():
            with gr.Column(scale=3):
                frame = gr.Image(label="Frame", interactive=False, elem_id="inspect-frame", visible=False)
                observation = gr.Dataframe(headers=["entry", "value"], label="Observation", interactive=False,
                                           elem_id="inspect-obs", visible=False)
                distribution = gr.Plot(label="Action distribution", elem_id="inspect-dist", format="png")
            with gr.Column(scale=2):
                shown = gr.Textbox(label="Step shown", elem_id="inspect-at", interactive=False)
                action = gr.Textbox(label="Action", elem_id="inspect-action", interactive=False)
                value = gr.Textbox(label="Value estimate", elem_id="inspect-value", interactive=False)
                reward = gr.Textbox(label="Reward", elem_id="inspect-reward", interactive=False)
                to_go = gr.Textbox(label="Return-to-go (discounted, this episode's rewards)", elem_id="inspect-return",
                                   interactive=False)
                advantage = gr.Textbox(label="Advantage (return-to-go − value)", elem_id="inspect-advantage",
                                       interactive=False)
                memory = gr.Textbox(label="Memory state norm", elem_id="inspect-memory", interactive=False)
        curves = gr.Plot(label="Over the episode", elem_id="inspect-curves", format="png")
        with gr.Row():
            mp4 = gr.DownloadButton("Download mp4", interactive=False, elem_id="inspect-mp4")
            csv = gr.DownloadButton("Download CSV", interactive=False, elem_id="inspect-csv")

        shown_outputs = [shown, frame, observation, action, value, reward, to_go, advantage, memory, distribution,
                         curves]
        loaded_outputs = [episode_state, step, status, mp4, csv]

        def show(episode: Episode | None, t):
            if episode is None:
                return ["", gr.update(visible=False), gr.update(visible=False)] + [""] * 6 + [None, None]
            t = int(min(max(int(t or 0), 0), episode.length - 1))
            picture = episode.frame(t)
            vector = episode.observations is not None
            rows = ([[label, number(float(x))] for label, x in zip(episode.obs_labels(), episode.observations[t])]
                    if episode.observations is not None else None)
            return [f"{t} of {episode.length - 1}", gr.update(value=picture, visible=picture is not None),
                    gr.update(value=rows, visible=vector), action_text(episode.actions[t]),
                    number(at(episode.values, t)), number(float(episode.rewards[t])),
                    number(float(episode.returns[t])), number(at(episode.advantages, t)),
                    number(at(episode.memory_norms, t)), distribution_figure(episode, t), curves_figure(episode, t)]

        def loaded(episode: Episode, csv_path: Path, mp4_path: Path | None):
            return [episode, gr.update(minimum=0, maximum=max(episode.length - 1, 1), value=0), summary(episode),
                    gr.update(value=mp4_path, interactive=mp4_path is not None),
                    gr.update(value=csv_path, interactive=True)]

        def run_episode(name: str, seed_value, steps_value):
            try:
                episode, csv_path, mp4_path = inspector.record(name, int(seed_value or 0),
                                                               max(1, int(steps_value or DEFAULT_MAX_STEPS)))
            except (ConfigError, ValueError, OSError) as exc:  # OSError: the exports on a full disk
                raise gr.Error(str(exc)) from None
            return loaded(episode, csv_path, mp4_path)

        def open_recorded(path: str):
            try:
                episode = read_csv(path, first.cfg.env.id)
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                raise gr.Error(str(exc)) from None
            return loaded(episode, Path(path), None)

        run.click(run_episode, [checkpoint, seed, max_steps], loaded_outputs).success(
            show, [episode_state, step], shown_outputs)
        recorded.upload(open_recorded, [recorded], loaded_outputs).success(show, [episode_state, step], shown_outputs)
        step.change(show, [episode_state, step], shown_outputs, trigger_mode="always_last", show_progress="hidden")
        # in the browser, on the slider's own value: quick presses add up instead of racing each other to the server
        previous.click(None, [step], [step], js="(t) => Math.max(Number(t) - 1, 0)")
        following.click(None, [step], [step], js=NEXT_JS)
    return page


def launch(page, host: str = DEFAULT_HOST, port: int | None = None) -> str:
    """Start serving `page` in a background thread; returns its local URL (`page.close()` stops it)."""
    gradio()
    _, url, _ = page.launch(server_name=host, server_port=port, share=False, quiet=True, prevent_thread_lock=True,
                            show_error=True, ssr_mode=False, run_history=False, js=KEYS_JS,
                            max_file_size="200mb")
    return url

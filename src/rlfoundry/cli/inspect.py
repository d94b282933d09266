"""`rlfoundry inspect RUN`: the episode inspector page, served until Ctrl-C."""

from __future__ import annotations

import signal
import socket
import time
from typing import Annotated

import typer

from rlfoundry.cli.common import fail, warn
from rlfoundry.config.errors import ConfigError


def inspect(
    run: Annotated[str, typer.Argument(metavar="RUN", help="A run directory, @last (the newest run under runs/), a "
                                                           "model folder, or hf://ORG/NAME.")],
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="The port (default: the first free one from "
                                                                       "7860).")] = None,
    host: Annotated[str, typer.Option(help="The address to serve on. The default, 127.0.0.1, is this machine only; "
                                           "another address (0.0.0.0: every interface) lets other machines reach "
                                           "the page, and the page says so.")] = "127.0.0.1",
    checkpoint: Annotated[str | None, typer.Option(help="The checkpoint selected first: best, last, or a step "
                                                           "directory (default: best where one was saved, else "
                                                           "last).")] = None,
) -> None:
    """Serve a page that runs episodes of a trained policy and steps through them: frames, actions, the action
    distribution, values, rewards, returns-to-go; downloads as mp4 and CSV."""
    import torch

    from rlfoundry.inspect.app import Inspector, build_page, is_local, launch

    _check_host(host)
    try:
        inspector = Inspector(run, checkpoint)
        page = build_page(inspector, host)
    except ConfigError as exc:  # CheckpointError included; gradio missing
        fail(str(exc), 2)
    torch.set_num_threads(inspector.torch_threads())
    # Ctrl-C and SIGTERM stop the page, also where the parent left SIGINT ignored (a job started with `&`, a
    # process that ignores it for its own workers): an ignored signal is inherited across exec.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        url = launch(page, host, port)
    except OSError as exc:  # a busy port (the address was checked)
        fail(f"cannot serve on {host}{'' if port is None else f':{port}'}: {exc}", 1)
    try:
        if not is_local(host):
            warn(f"--host {host}: other machines can reach this page (the default, 127.0.0.1, is this machine only)")
        typer.echo(f"inspecting {inspector.name} at {url} (Ctrl-C stops)")
        while page.is_running:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        page.close()


def _check_host(host: str) -> None:
    """Exit 2 for a --host this machine cannot serve on (no such name, or an address it does not have), before
    anything loads; the page's server would report it as a busy port."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        fail(f"--host {host}: not an address, nor a name this machine resolves ({exc})", 2)
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address[0], 0))
        except OSError as exc:
            fail(f"--host {host}: not an address of this machine ({exc.strerror}); 127.0.0.1 serves this machine "
                 "only, 0.0.0.0 every network", 2)

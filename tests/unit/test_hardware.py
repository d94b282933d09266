"""`train.torch_threads: auto` and `train.precision: auto` resolved on faked hardware descriptions, the warning for
emulated bf16, and the resolved values in a run's provenance, kept on resume."""

from __future__ import annotations

import io

import pytest
import torch
import yaml
from rich.console import Console

import rlfoundry
from rlfoundry.config.sections import NetworkConfig
from rlfoundry.run import hardware
from rlfoundry.run.hardware import Hardware

AVX2 = Hardware("AMD EPYC 7B12", ("avx", "avx2", "fma"), cores=2)
AMX = Hardware("Intel Xeon Platinum 8480+", ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"),
               cores=8)
H100 = Hardware("AMD EPYC 9654", ("avx", "avx2", "fma", "avx512f", "avx512_bf16"), cores=16, gpu="NVIDIA H100",
                gpu_bf16=True)
T4 = Hardware("Intel Xeon", ("avx", "avx2", "fma"), cores=4, gpu="Tesla T4", gpu_bf16=False)
CPU, CUDA = torch.device("cpu"), torch.device("cuda")
MLP = NetworkConfig()  # 64 x 64
WIDE = NetworkConfig(hidden_sizes=[256, 256])
CNN = NetworkConfig(encoder="nature_cnn", hidden_sizes=[512], shared=True)


@pytest.mark.parametrize(("network", "machine", "environ", "expected"), [
    (MLP, AMX, {}, 1),  # small operations: one thread
    (WIDE, AMX, {}, 8),
    (CNN, AVX2, {}, 2),
    (CNN, AMX, {"RLFOUNDRY_CONCURRENT_RUNS": "3"}, 2),  # 8 cores shared by 3 runs
    (CNN, AVX2, {"RLFOUNDRY_CONCURRENT_RUNS": "4"}, 1),  # never below one
    (CNN, AVX2, {"RLFOUNDRY_CONCURRENT_RUNS": "many"}, 2),  # unreadable: not shared
])
def test_auto_threads_are_the_share_of_cores_where_threads_pay_off(network, machine, environ, expected):
    assert hardware.resolve_threads("auto", network, machine, environ) == expected


def test_an_explicit_thread_count_wins():
    assert hardware.resolve_threads(3, MLP, AVX2, {"RLFOUNDRY_CONCURRENT_RUNS": "2"}) == 3


@pytest.mark.parametrize(("network", "machine", "device", "expected"), [
    (CNN, AVX2, CPU, "fp32"),  # no native bf16
    (CNN, AMX, CPU, "bf16"),
    (MLP, AMX, CPU, "fp32"),  # native, but nothing for bf16 to speed up
    (CNN, H100, CUDA, "fp32"),  # native, but measured slower than fp32 on an H100 (Breakout PPO)
    (CNN, T4, CUDA, "fp32"),
    (CNN, T4, CPU, "fp32"),
])
def test_auto_precision_is_bf16_only_on_cpus_where_it_is_native(network, machine, device, expected):
    assert hardware.resolve_precision("auto", device, network, machine) == (expected, None)


def test_explicit_bf16_without_native_support_warns_and_stays_bf16():
    precision, warning = hardware.resolve_precision("bf16", CPU, CNN, AVX2)
    assert precision == "bf16"
    assert "AMD EPYC 7B12 (avx, avx2, fma)" in warning and "no native bfloat16" in warning
    assert "10x slower" in warning and "train.precision=auto" in warning
    precision, warning = hardware.resolve_precision("bf16", CUDA, CNN, T4)
    assert precision == "bf16" and "GPU Tesla T4" in warning
    assert hardware.resolve_precision("bf16", CPU, MLP, AMX) == ("bf16", None)
    assert hardware.resolve_precision("fp32", CPU, CNN, AMX) == ("fp32", None)


def test_descriptions_name_the_cpu_its_extensions_and_bf16():
    assert AVX2.describe() == "AMD EPYC 7B12 (avx, avx2, fma; no native bf16), 2 cores"
    assert "amx_bf16; native bf16), 8 cores" in AMX.describe()
    assert H100.describe().endswith("; GPU NVIDIA H100 (bf16)")


def test_this_machine_is_detected_consistently_with_torch():
    found = hardware.detect()
    assert found.cores >= 1 and found.cpu
    assert set(found.extensions) <= set(hardware.EXTENSIONS)
    if torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported():
        assert found.cpu_bf16
    if not torch.cpu._is_avx2_supported():
        assert not found.cpu_bf16


QUIET = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "eval.every_steps=0",
         "eval.episodes=1", "eval.stop_at_threshold=false", "env.num_envs=2", "algo.num_steps=32",
         "algo.minibatch_size=64", "algo.update_epochs=1"]


def test_provenance_holds_the_resolved_values_and_resume_keeps_them(tmp_path):
    threads = torch.get_num_threads()
    try:
        run, _ = rlfoundry.train("CartPole-v1:ppo", [*QUIET, "train.total_timesteps=128", "checkpoint.every_steps=64"],
                                 tmp_path / "run")
        config = yaml.safe_load((run / "config.yaml").read_text())
        assert config["train"]["torch_threads"] == "auto" and config["train"]["precision"] == "auto"
        provenance = config["provenance"]
        assert provenance["torch_threads"] == 1 and provenance["precision"] == "fp32"  # a 64-wide MLP
        assert provenance["hardware"] == hardware.detect().describe()
        # The run started with 3 threads (as on another machine, or another share): resume keeps 3, as does
        # the precision it started with.
        provenance.update(torch_threads=3)
        config["train"]["total_timesteps"] = 256
        (run / "config.yaml").write_text(yaml.safe_dump(config))
        (run / "summary.json").write_text((run / "summary.json").read_text().replace('"finished"', '"stopped"'))
        rlfoundry.train(resume=run)
        assert torch.get_num_threads() == 3
        assert "3 torch threads, fp32" in (run / "run.log").read_text()
    finally:
        torch.set_num_threads(threads)


def test_bf16_on_emulating_hardware_warns_on_the_console_and_in_the_log(tmp_path, monkeypatch):
    monkeypatch.setattr(hardware, "detect", lambda: AVX2)
    console = Console(file=io.StringIO(), width=200)
    run, summary = rlfoundry.train("CartPole-v1:ppo", [*QUIET, "train.total_timesteps=64", "train.precision=bf16"],
                                   tmp_path / "run", console=console)
    assert summary["status"] == "finished"
    assert "no native bfloat16" in console.file.getvalue() and "AMD EPYC 7B12" in console.file.getvalue()
    assert "WARNING train.precision=bf16: the CPU AMD EPYC 7B12" in (run / "run.log").read_text()


def test_cpu_names_without_a_model_number_carry_the_family_and_model():
    zen5 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n" \
           "flags\t\t: fpu avx avx2 fma avx512f avx512_bf16\n\nprocessor\t: 1\ncpu family\t: 26\nmodel\t\t: 2\n" \
           "model name\t: AMD EPYC\nflags\t\t: fpu avx\n"
    assert hardware._cpuinfo(zen5) == ("AMD EPYC family 26 model 2", {"fpu", "avx", "avx2", "fma", "avx512f",
                                                                        "avx512_bf16"})
    rome = zen5.replace("model name\t: AMD EPYC\n", "model name\t: AMD EPYC 7B12\n")
    assert hardware._cpuinfo(rome)[0] == "AMD EPYC 7B12"  # the name says it already
    arm = "processor\t: 0\nFeatures\t: fp asimd bf16\nCPU implementer\t: 0x41\n"
    assert hardware._cpuinfo(arm) == (None, {"fp", "asimd", "bf16"})

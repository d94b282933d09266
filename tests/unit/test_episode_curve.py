"""benchmarks/episode_curve.py: training episodes binned by env steps, per run and over the runs."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import benchmark_script


def curve_module():
    return benchmark_script("episode_curve")


def fake_run(folder: Path, seed: int, episodes: list[tuple[int, float]]) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(f"variant: dreamer\nenv: {{id: ALE/Breakout-v5}}\ntrain: {{seed: {seed}}}\n"
                                        "provenance: {device: cuda, hardware: some GPU}\n")
    rows = ["global_step,wall_time,train/episode_return,diag/updates"]
    for step in range(100, 2100, 100):  # a row every 100 steps; an episode's return on the row where it ended
        ret = dict(episodes).get(step)
        rows.append(f"{step},{step / 10},{'' if ret is None else ret},{step // 4}")
    (folder / "metrics.csv").write_text("\n".join(rows) + "\n")
    return folder


def test_episodes_are_binned_per_run_and_averaged_over_the_runs(tmp_path):
    module = curve_module()
    runs = [module.load(fake_run(tmp_path / "s1", 1, [(300, 1.0), (900, 3.0), (1500, 4.0)])),
            module.load(fake_run(tmp_path / "s2", 2, [(1000, 2.0), (1100, 6.0)]))]
    lines = module.table(runs, 1000)
    assert lines[2] == "| 0–1,000 | 2.0 (2) | 2.0 (1) | 2.0 |"  # an episode ending at 1,000 belongs to the first bin
    assert lines[3] == "| 1,000–2,000 | 4.0 (1) | 6.0 (1) | 5.0 |"
    assert "| ALE/Breakout-v5:dreamer seed 2 | 2,000 | 500 | 200 | cuda | some GPU |" in lines
    module.write_episodes(runs, tmp_path / "episodes.csv")
    assert (tmp_path / "episodes.csv").read_text().splitlines()[1:3] == ["s1,1,300,1", "s1,1,900,3"]

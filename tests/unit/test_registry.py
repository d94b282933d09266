"""The run registry: recording, upserting, scanning, querying, deleting, cleaning, concurrent writers."""

from __future__ import annotations

import json
import multiprocessing as mp
import sqlite3
import warnings
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from rlfoundry.config.errors import ConfigError
from rlfoundry.records.registry import (
    DB_NAME,
    Registry,
    RegistryError,
    RegistryWarning,
    RunRecord,
    config_hash,
    select_for_clean,
)


def make_config(env_id="CartPole-v1", variant="ppo", seed=1, lr=0.001, runs_root="runs",
                created="2025-01-02T03:04:05+0100", commit="abc123") -> dict:
    return {
        "variant": variant,
        "env": {"id": env_id, "num_envs": 8},
        "algo": {"name": "ppo", "lr": lr, "gamma": 0.99},
        "train": {"total_timesteps": 1000, "seed": seed},
        "logging": {"runs_root": runs_root, "csv": True},
        "provenance": {"created": created, "git_commit": commit, "versions": {"torch": "2.0"}},
    }


def make_summary(status="finished", best=None, **extra) -> dict:
    summary = {
        "status": status, "env_id": "CartPole-v1", "algo": "ppo", "variant": "ppo", "seed": 1, "total_steps": 1000,
        "wall_time_s": 2.5, "sps": 400.0, "train_return_mean": 20.0, "eval_return_mean": best,
        "eval_return_std": 1.0 if best is not None else None, "best_eval_return": best, "solved_at_step": None,
        "versions": {},
    }
    summary.update(extra)
    return summary


def make_run(path: Path, config: dict | None = None, summary: dict | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    if summary is not None:
        (path / "summary.json").write_text(json.dumps(summary))
    return path


def test_record_reads_config_and_summary(tmp_path):
    registry = Registry(tmp_path)
    config = make_config(seed=7)
    run = make_run(tmp_path / "a", config, make_summary(best=123.5, seed=7, solved_at_step=800))
    run_id = registry.record_run(run)
    assert run_id == 1
    record = registry.get(run_id)
    assert record.run_dir == str(run.resolve())
    assert (record.env_id, record.algo, record.variant, record.seed) == ("CartPole-v1", "ppo", "ppo", 7)
    assert record.config_hash == config_hash(config)
    assert record.git_commit == "abc123"
    assert record.status == "finished"
    assert record.started_at == "2025-01-02T02:04:05+00:00"  # provenance.created, in UTC
    assert record.ended_at is not None
    assert (record.total_steps, record.wall_time_s, record.sps) == (1000, 2.5, 400.0)
    assert (record.eval_return_mean, record.best_eval_return, record.solved_at_step) == (123.5, 123.5, 800)
    assert (tmp_path / DB_NAME).exists()


def test_record_upserts_by_resolved_path(tmp_path):
    registry = Registry(tmp_path)
    run = make_run(tmp_path / "a", None, make_summary(status="running"))  # the trainer's first record: no config yet
    first = registry.record_run(run)
    record = registry.get(first)
    assert record.status == "running" and record.ended_at is None and record.config_hash is None
    assert record.env_id == "CartPole-v1" and record.seed == 1  # taken from the summary
    started = record.started_at

    make_run(run, make_config(), make_summary(best=50.0))
    assert registry.record_run(tmp_path / "x" / ".." / "a") == first
    record = registry.get(first)
    assert record.status == "finished" and record.ended_at is not None
    assert record.started_at == started  # the first record's start time stays
    assert record.config_hash == config_hash(make_config())
    assert record.best_eval_return == 50.0
    assert len(registry.query()) == 1

    make_run(run, summary=make_summary(status="running", best=50.0))  # resumed
    assert registry.record_run(run) == first
    assert registry.get(first).ended_at is None
    # Updates use up no ids: the next run is number 2, something a user can type.
    assert registry.record_run(make_run(tmp_path / "b", make_config(seed=2), make_summary())) == first + 1


def test_config_hash_is_stable_and_ignores_provenance_and_runs_root():
    base = make_config()
    assert config_hash(base) == config_hash(make_config())
    reordered = dict(reversed(list(base.items())))
    assert config_hash(reordered) == config_hash(base)
    other_provenance = make_config(created="2030-01-01T00:00:00+0000", commit="fff")
    assert config_hash(other_provenance) == config_hash(base)
    no_provenance = {key: value for key, value in base.items() if key != "provenance"}
    assert config_hash(no_provenance) == config_hash(base)
    assert config_hash(make_config(runs_root="/elsewhere")) == config_hash(base)
    assert config_hash(make_config(lr=0.002)) != config_hash(base)
    assert config_hash(make_config(seed=2)) != config_hash(base)
    assert len(config_hash(base)) == 64


@pytest.mark.parametrize("summary_text", [
    "{not json", "[1, 2]", '{"total_steps": 3}', json.dumps(make_summary(total_steps="many")), "",
])
def test_unreadable_summary_is_skipped_with_a_warning(tmp_path, summary_text):
    registry = Registry(tmp_path)
    run = make_run(tmp_path / "bad", make_config())
    (run / "summary.json").write_text(summary_text)
    with pytest.warns(RegistryWarning, match="skipped"):
        assert registry.record_run(run) is None
    assert registry.query() == []


def test_missing_summary_and_corrupt_config_are_skipped(tmp_path):
    registry = Registry(tmp_path)
    with pytest.warns(RegistryWarning, match="no summary.json"):
        assert registry.record_run(make_run(tmp_path / "empty", make_config())) is None
    run = make_run(tmp_path / "badcfg", None, make_summary())
    (run / "config.yaml").write_text("env:\n  id: [unclosed\n")
    with pytest.warns(RegistryWarning, match="config.yaml"):
        assert registry.record_run(run) is None


def test_scan_records_unknown_runs_once_and_skips_bad_ones(tmp_path):
    make_run(tmp_path / "r1", make_config(seed=1), make_summary())
    make_run(tmp_path / "r2", make_config(seed=2), make_summary())
    make_run(tmp_path / "sweep" / "trial0", make_config(seed=3), make_summary())  # nested one level
    (make_run(tmp_path / "broken", make_config(seed=4)) / "summary.json").write_text("{")
    (tmp_path / "notes").mkdir()
    registry = Registry(tmp_path)
    with pytest.warns(RegistryWarning, match="broken"):
        ids = registry.scan()
    assert len(ids) == 3
    assert sorted(r.seed for r in registry.query()) == [1, 2, 3]

    with warnings.catch_warnings(record=True):
        assert registry.scan() == []  # finished runs already known: nothing recorded again
    make_run(tmp_path / "r5", make_config(seed=5), make_summary())
    with warnings.catch_warnings(record=True):
        assert len(registry.scan()) == 1
    assert len(registry.query()) == 4


def test_scan_refreshes_runs_still_marked_running(tmp_path):
    run = make_run(tmp_path / "r", make_config(), make_summary(status="running"))
    registry = Registry(tmp_path)
    run_id = registry.record_run(run)
    make_run(run, summary=make_summary(status="failed"))  # ended without a last record
    registry.scan()
    assert registry.get(run_id).status == "failed"


@pytest.fixture
def populated(tmp_path):
    registry = Registry(tmp_path)
    rows = [  # env, variant, seed, status, best
        ("CartPole-v1", "ppo", 1, "finished", 400.0),
        ("CartPole-v1", "ppo-lstm", 2, "finished", 500.0),
        ("Pendulum-v1", "ppo", 1, "failed", None),
        ("MiniGrid-Empty-5x5-v0", "ppo", 3, "running", 0.9),
    ]
    for i, (env_id, variant, seed, status, best) in enumerate(rows):
        make_run(tmp_path / f"run{i}", make_config(env_id=env_id, variant=variant, seed=seed),
                 make_summary(status=status, best=best, env_id=env_id, variant=variant, seed=seed))
        registry.record_run(tmp_path / f"run{i}")
    return registry


def test_query_filters(populated):
    def seeds(**filters):
        return [(r.env_id, r.seed) for r in populated.query(filters)]

    assert len(populated.query()) == 4
    assert seeds(env="cartpole") == [("CartPole-v1", 1), ("CartPole-v1", 2)]  # substring, any case
    assert seeds(env="pole") == [("CartPole-v1", 1), ("CartPole-v1", 2)]
    assert seeds(variant="ppo-lstm") == [("CartPole-v1", 2)]
    assert seeds(status="failed") == [("Pendulum-v1", 1)]
    assert seeds(seed=1) == [("CartPole-v1", 1), ("Pendulum-v1", 1)]
    assert seeds(algo="ppo", env="Mini") == [("MiniGrid-Empty-5x5-v0", 3)]
    assert seeds(algo="dqn") == []
    assert seeds(env=None) == seeds()  # None means "no filter"
    with pytest.raises(ConfigError, match="unknown filter 'colour'"):
        populated.query({"colour": "red"})


def test_query_sort(populated):
    best = [r.best_eval_return for r in populated.query(sort="best_eval_return", descending=True)]
    assert best == [500.0, 400.0, 0.9, None]  # NULLs last either way
    best = [r.best_eval_return for r in populated.query(sort="best")]
    assert best == [0.9, 400.0, 500.0, None]
    assert [r.id for r in populated.query(sort="id", descending=True)] == [4, 3, 2, 1]
    envs = [r.env_id for r in populated.query(sort="env")]
    assert envs == sorted(envs)
    with pytest.raises(ConfigError, match="unknown sort key 'colour'"):
        populated.query(sort="colour")


def test_delete_removes_rows_and_ids_are_not_reused(populated, tmp_path):
    assert populated.delete([2, 4, 99]) == 2
    assert [r.id for r in populated.query()] == [1, 3]
    assert populated.get(2) is None
    new = populated.record_run(make_run(tmp_path / "new", make_config(seed=9), make_summary()))
    assert new == 5
    assert populated.delete([]) == 0


def test_reads_on_a_missing_database_create_nothing(tmp_path):
    registry = Registry(tmp_path / "nothing")
    assert registry.get(1) is None
    assert registry.query() == []
    assert registry.scan() == []
    assert not (tmp_path / "nothing").exists()


def test_corrupt_database_is_a_registry_error(tmp_path):
    (tmp_path / DB_NAME).write_bytes(b"this is not sqlite" * 100)
    run = make_run(tmp_path / "r", make_config(), make_summary())
    with pytest.raises(RegistryError, match="registry.sqlite"):
        Registry(tmp_path).record_run(run)


def test_database_uses_wal(populated, tmp_path):
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def record(run_id, env_id="CartPole-v1", variant="ppo", best=None, status="finished", days_ago=30.0) -> RunRecord:
    started = (datetime.now(UTC) - timedelta(days=days_ago)).isoformat(timespec="seconds")
    return RunRecord(
        id=run_id, run_dir=f"/runs/{run_id}", env_id=env_id, algo="ppo", variant=variant, seed=run_id,
        config_hash=None, git_commit=None, status=status, started_at=started, ended_at=None, total_steps=None,
        wall_time_s=None, sps=None, train_return_mean=None, eval_return_mean=best, eval_return_std=None,
        best_eval_return=best, solved_at_step=None, recorded_at=started,
    )


def test_select_for_clean_keeps_best_per_group_recent_and_running():
    records = [
        record(1, best=10.0), record(2, best=30.0), record(3, best=20.0), record(4, best=None),
        record(5, variant="ppo-lstm", best=1.0), record(6, variant="ppo-lstm", best=2.0),
        record(7, best=5.0, days_ago=1.0),                   # recent
        record(8, best=0.0, status="running"),               # running
        replace(record(9, best=0.0), started_at=None),       # unknown age
    ]
    chosen = sorted(r.id for r in select_for_clean(records, keep_best=1, keep_recent_days=7))
    assert chosen == [1, 3, 4, 5]
    chosen = sorted(r.id for r in select_for_clean(records, keep_best=2, keep_recent_days=0.5))
    assert chosen == [1, 4, 7]
    chosen = sorted(r.id for r in select_for_clean(records, keep_best=0, keep_recent_days=0))
    assert chosen == [1, 2, 3, 4, 5, 6, 7]


# ---------------------------------------------------------------------- concurrent writers

RUNS_PER_WRITER = 50


def _writer(root: str, worker: int, barrier, results) -> None:
    """Record RUNS_PER_WRITER runs as the trainer does: once at the start, once at the end."""
    try:
        registry = Registry(root)
        barrier.wait(timeout=60)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RegistryWarning)
            for i in range(RUNS_PER_WRITER):
                run = make_run(Path(root) / f"w{worker}_{i:02d}", None,
                               make_summary(status="running", seed=1000 * worker + i))
                registry.record_run(run)
                make_run(run, make_config(seed=1000 * worker + i),
                         make_summary(best=float(i), seed=1000 * worker + i))
                registry.record_run(run)
        results.put((worker, None))
    except BaseException as exc:  # reported to the parent, which fails the test with it
        results.put((worker, f"{type(exc).__name__}: {exc}"))


def test_two_concurrent_writer_processes(tmp_path):
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    workers = [ctx.Process(target=_writer, args=(str(tmp_path), k, barrier, results)) for k in (1, 2)]
    for process in workers:
        process.start()
    outcomes = dict(results.get(timeout=240) for _ in workers)
    for process in workers:
        process.join(timeout=60)
    assert outcomes == {1: None, 2: None}
    assert all(process.exitcode == 0 for process in workers)

    records = Registry(tmp_path).query()
    assert len(records) == 2 * RUNS_PER_WRITER
    assert sorted(r.seed for r in records) == sorted(1000 * k + i for k in (1, 2) for i in range(RUNS_PER_WRITER))
    assert all(r.status == "finished" and r.config_hash is not None for r in records)
    assert sorted(r.id for r in records) == list(range(1, 2 * RUNS_PER_WRITER + 1))


def test_group_is_recorded_filtered_and_left_out_of_the_config_hash(tmp_path):
    registry = Registry(tmp_path)
    grouped = make_config(seed=1)
    grouped["logging"]["group"] = "sweep-a"
    registry.record_run(make_run(tmp_path / "a", grouped, make_summary()))
    registry.record_run(make_run(tmp_path / "b", make_config(seed=2), make_summary(seed=2)))
    assert [(r.seed, r.trial_group) for r in registry.query(sort="seed")] == [(1, "sweep-a"), (2, None)]
    assert [r.seed for r in registry.query({"group": "sweep-a"})] == [1]
    assert config_hash(grouped) == config_hash(make_config(seed=1))


def test_a_version_1_registry_is_migrated_and_keeps_its_rows(tmp_path):
    """A registry written before the group column (schema version 1) gains it on first use; its rows stay."""
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, run_dir TEXT NOT NULL UNIQUE, "
                     "env_id TEXT, algo TEXT, variant TEXT, seed INTEGER, config_hash TEXT, git_commit TEXT, "
                     "status TEXT NOT NULL, started_at TEXT, ended_at TEXT, total_steps INTEGER, wall_time_s REAL, "
                     "sps REAL, train_return_mean REAL, eval_return_mean REAL, eval_return_std REAL, "
                     "best_eval_return REAL, solved_at_step INTEGER, recorded_at TEXT NOT NULL)")
        conn.execute("INSERT INTO runs (run_dir, env_id, seed, status, recorded_at) "
                     "VALUES ('/old/run', 'CartPole-v1', 4, 'finished', '2025-01-01T00:00:00+00:00')")
        conn.execute("PRAGMA user_version = 1")
    registry = Registry(tmp_path)
    grouped = make_config(seed=5)
    grouped["logging"]["group"] = "g"
    registry.record_run(make_run(tmp_path / "new", grouped, make_summary(seed=5)))
    assert [(r.run_dir, r.seed, r.trial_group) for r in registry.query(sort="seed")] == [
        ("/old/run", 4, None), (str((tmp_path / "new").resolve()), 5, "g")]
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2

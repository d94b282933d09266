"""The run registry: one SQLite row per run directory, under `<runs_root>/registry.sqlite`.

The trainer records a run when it starts and again when it ends (`record_run`); `scan()` adds run
directories that the registry has not seen (runs made before it existed, or with `--run-dir`
elsewhere and then moved in). `rlfoundry runs ...` (cli/runs.py) reads it.

Concurrency: several training processes may write at once. The database uses WAL journalling (readers
never block the writer), a busy timeout, and one short `BEGIN IMMEDIATE` transaction per write:
taking the write lock up front means a transaction never has to upgrade a read lock, the case in
which SQLite returns "database is locked" without waiting (https://sqlite.org/lang_transaction.html).
A connection is opened per call, so a Registry object is safe to use from forked or spawned workers.

A run directory whose summary.json or config.yaml cannot be read is skipped with a `RegistryWarning`;
it never stops a run or a listing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import sqlite3
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from rlfoundry.config.errors import ConfigError

DB_NAME = "registry.sqlite"
SCHEMA_VERSION = 2
BUSY_TIMEOUT_S = 60.0
SCAN_DEPTH = 3  # run directories are found this many levels below the runs root at most (sweeps nest them)

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS runs (
        id                INTEGER PRIMARY KEY AUTOINCREMENT,  -- AUTOINCREMENT: a deleted run's id is never reused
        run_dir           TEXT NOT NULL UNIQUE,               -- resolved absolute path
        env_id            TEXT,
        algo              TEXT,
        variant           TEXT,
        seed              INTEGER,
        config_hash       TEXT,
        git_commit        TEXT,
        status            TEXT NOT NULL,
        started_at        TEXT,                               -- ISO 8601, UTC
        ended_at          TEXT,                               -- ISO 8601, UTC; NULL while running
        total_steps       INTEGER,
        wall_time_s       REAL,
        sps               REAL,
        train_return_mean REAL,
        eval_return_mean  REAL,
        eval_return_std   REAL,
        best_eval_return  REAL,
        solved_at_step    INTEGER,
        recorded_at       TEXT NOT NULL,                      -- ISO 8601, UTC: when this row was last written
        trial_group       TEXT                                -- logging.group: the trials or sweep the run belongs to
    )""",
    "CREATE INDEX IF NOT EXISTS runs_group ON runs (env_id, algo, variant)",
)
# What turns a registry of an older schema version into the next one, by the version it reaches.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: ("ALTER TABLE runs ADD COLUMN trial_group TEXT",),
}

# summary.json keys copied into the row, with the JSON types each accepts (None is always allowed).
SUMMARY_FIELDS: dict[str, tuple[type, ...]] = {
    "total_steps": (int,),
    "wall_time_s": (int, float),
    "sps": (int, float),
    "train_return_mean": (int, float),
    "eval_return_mean": (int, float),
    "eval_return_std": (int, float),
    "best_eval_return": (int, float),
    "solved_at_step": (int,),
}

FILTERS = ("env", "algo", "variant", "status", "seed", "group")


class RegistryWarning(UserWarning):
    """A run directory was skipped (its files are missing or unreadable)."""


class RegistryError(Exception):
    """The database itself cannot be opened or written (corrupt, read-only, locked past the timeout)."""


@dataclass(frozen=True)
class RunRecord:
    id: int
    run_dir: str
    env_id: str | None
    algo: str | None
    variant: str | None
    seed: int | None
    config_hash: str | None
    git_commit: str | None
    status: str
    started_at: str | None
    ended_at: str | None
    total_steps: int | None
    wall_time_s: float | None
    sps: float | None
    train_return_mean: float | None
    eval_return_mean: float | None
    eval_return_std: float | None
    best_eval_return: float | None
    solved_at_step: int | None
    recorded_at: str
    trial_group: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


COLUMNS = tuple(f.name for f in fields(RunRecord))
SORT_ALIASES = {
    "env": "env_id", "steps": "total_steps", "started": "started_at", "ended": "ended_at",
    "eval": "eval_return_mean", "return": "eval_return_mean", "best": "best_eval_return", "train": "train_return_mean",
    "dir": "run_dir", "commit": "git_commit", "hash": "config_hash", "group": "trial_group",
}


# ---------------------------------------------------------------------- reading a run directory


def config_hash(config: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a resolved config, without its provenance, runs root and group.

    Two runs with the same hash were trained with the same settings, wherever they were written.
    """
    cfg = {key: value for key, value in config.items() if key != "provenance"}
    if isinstance(cfg.get("logging"), dict):
        cfg["logging"] = {key: value for key, value in cfg["logging"].items() if key not in ("runs_root", "group")}
    canonical = json.dumps(cfg, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _utc(stamp: Any) -> str | None:
    """provenance.created (`%Y-%m-%dT%H:%M:%S%z`, local time) as ISO 8601 in UTC, so text order is time order."""
    if not isinstance(stamp, str):
        return None
    for parse in (lambda s: datetime.strptime(s, "%Y-%m-%dT%H:%M:%S%z"), datetime.fromisoformat):
        try:
            moment = parse(stamp)
        except ValueError:
            continue
        if moment.tzinfo is None:
            moment = moment.astimezone()  # a naive stamp is local time
        return moment.astimezone(UTC).isoformat(timespec="seconds")
    return None


def dotted(mapping: dict[str, Any], key: str) -> Any:
    """The value of a dotted key (algo.lr) in nested mappings; None where a part is missing."""
    value: Any = mapping
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _typed(value: Any, types: tuple[type, ...], name: str) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, types):
        raise ValueError(f"{name} is {value!r}, expected {' or '.join(t.__name__ for t in types)} or null")
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def read_run(run_dir: Path) -> dict[str, Any]:
    """The registry fields of one run directory; ValueError says why it cannot be read.

    summary.json is required (the trainer writes it first). config.yaml is optional because the trainer
    writes it only once the envs are built; without it env, algo, variant and seed come from the summary.
    """
    summary_path = run_dir / "summary.json"
    try:
        summary = json.loads(summary_path.read_text())
    except FileNotFoundError:
        raise ValueError("no summary.json") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"summary.json is unreadable ({exc})") from None
    if not isinstance(summary, dict):
        raise ValueError("summary.json is not a JSON object")
    if not isinstance(summary.get("status"), str) or not summary["status"]:
        raise ValueError(f"summary.json: status is {summary.get('status')!r}, expected a string")

    config: dict[str, Any] = {}
    config_path = run_dir / "config.yaml"
    if config_path.exists():
        try:
            config = yaml.safe_load(config_path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ValueError(f"config.yaml is unreadable ({' '.join(str(exc).split())})") from None
        if not isinstance(config, dict):
            raise ValueError("config.yaml is not a mapping")

    def pick(config_key: str, summary_key: str, types: tuple[type, ...]) -> Any:
        value = dotted(config, config_key)
        if value is None:
            value = summary.get(summary_key)
        return _typed(value, types, config_key)

    record = {
        "env_id": pick("env.id", "env_id", (str,)),
        "algo": pick("algo.name", "algo", (str,)),
        "variant": pick("variant", "variant", (str,)),
        "seed": pick("train.seed", "seed", (int,)),
        "config_hash": config_hash(config) if config else None,
        "git_commit": _typed(dotted(config, "provenance.git_commit"), (str,), "provenance.git_commit"),
        "status": summary["status"],
        "trial_group": _typed(dotted(config, "logging.group"), (str,), "logging.group"),
        "created": _utc(dotted(config, "provenance.created")),
    }
    for key, types in SUMMARY_FIELDS.items():
        record[key] = _typed(summary.get(key), types, f"summary.json: {key}")
    # The summary is rewritten when a run ends, so its modification time is the end time (also for old runs).
    record["summary_mtime"] = datetime.fromtimestamp(summary_path.stat().st_mtime, UTC).isoformat(
        timespec="seconds")
    return record


# ---------------------------------------------------------------------- the registry


class Registry:
    """The runs recorded under one runs root."""

    def __init__(self, runs_root: str | Path):
        self.runs_root = Path(runs_root)
        self.path = self.runs_root / DB_NAME

    # ------------------------------------------------------------------ connection

    @contextlib.contextmanager
    def _connect(self, write: bool) -> Iterator[sqlite3.Connection]:
        """A connection for one short transaction, closed afterwards; sqlite3 errors become RegistryError."""
        if write:
            self.runs_root.mkdir(parents=True, exist_ok=True)
        conn = None
        try:
            # isolation_level=None: no implicit transactions; each write is an explicit BEGIN IMMEDIATE.
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            conn.row_factory = sqlite3.Row
            self._prepare(conn)
            if write:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            else:
                yield conn
        except sqlite3.Error as exc:
            raise RegistryError(f"run registry {self.path}: {exc}") from exc
        finally:
            if conn is not None:
                conn.close()

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """WAL mode and the schema, once per database; safe when several processes get here together."""
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise RegistryError(f"run registry {self.path} has schema version {version}; this rlfoundry reads "
                                f"version {SCHEMA_VERSION} (a newer rlfoundry wrote it)")
        # journal_mode=WAL is persistent in the file; switching needs a moment with no other connection
        # active, so a concurrent first use can see SQLITE_BUSY here: wait and try again.
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        conn.execute("BEGIN IMMEDIATE")
        try:
            found = conn.execute("PRAGMA user_version").fetchone()[0]
            if found < SCHEMA_VERSION:
                # One statement at a time: executescript() would commit the open transaction first. A new
                # database gets the whole schema; an older one the migrations from its version on.
                steps = SCHEMA if found == 0 else [sql for to in range(found + 1, SCHEMA_VERSION + 1)
                                                  for sql in MIGRATIONS[to]]
                for statement in steps:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ writing

    def record_run(self, run_dir: str | Path) -> int | None:
        """Insert or update the row of one run directory and return its id.

        Called by the trainer at the start and at the end of a run. A run directory that cannot be read
        is skipped with a RegistryWarning and None is returned; a database failure raises RegistryError.
        """
        run_dir = Path(run_dir).resolve()
        try:
            found = read_run(run_dir)
        except (OSError, ValueError) as exc:
            warnings.warn(f"run registry: skipped {run_dir}: {exc}", RegistryWarning, stacklevel=2)
            return None
        now = utc_now()
        ended = None if found["status"] == "running" else found["summary_mtime"]
        row = {key: found[key] for key in COLUMNS if key in found}
        row.update(run_dir=str(run_dir), started_at=found["created"] or now, ended_at=ended, recorded_at=now)
        # Update, else insert, inside one write transaction. (Not INSERT ... ON CONFLICT DO UPDATE: with
        # AUTOINCREMENT every such upsert uses up an id, and ids are meant to stay small and dense.)
        # started_at stays the first record's; config fields keep a known value when this read lacks one
        # (config.yaml is written after the first record); ended_at follows the summary (NULL on resume).
        keep_known = ("env_id", "algo", "variant", "seed", "config_hash", "git_commit", "trial_group")
        changed = [name for name in row if name not in ("run_dir", "started_at")]
        assignments = ", ".join(f"{name} = COALESCE(?, {name})" if name in keep_known else f"{name} = ?"
                                for name in changed)
        with self._connect(write=True) as conn:
            found_id = conn.execute("SELECT id FROM runs WHERE run_dir = ?", (row["run_dir"],)).fetchone()
            if found_id is not None:
                conn.execute(f"UPDATE runs SET {assignments} WHERE id = ?", [row[n] for n in changed] + [found_id[0]])
                return found_id[0]
            cursor = conn.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                                  list(row.values()))
            return cursor.lastrowid

    def scan(self) -> list[int]:
        """Record run directories under the runs root that are not known yet, and refresh runs still marked
        running (their process may have ended without a last record). Returns the ids recorded."""
        if not self.runs_root.is_dir():
            return []
        with self._connect(write=False) as conn:
            known = {row["run_dir"]: row["status"] for row in conn.execute("SELECT run_dir, status FROM runs")}
        ids = []
        for run_dir in self._find_run_dirs(self.runs_root.resolve(), SCAN_DEPTH):
            key = str(run_dir)
            if key in known and known[key] != "running":
                continue
            run_id = self.record_run(run_dir)
            if run_id is not None:
                ids.append(run_id)
        for key, status in known.items():  # running runs outside the runs root (--run-dir elsewhere)
            if status == "running" and Path(key).is_dir() and not Path(key).is_relative_to(self.runs_root.resolve()):
                run_id = self.record_run(key)
                if run_id is not None:
                    ids.append(run_id)
        return ids

    def rebuild(self) -> tuple[Path | None, list[int]]:
        """A new database from the run directories under the runs root (after corruption, or a runs folder moved
        with its records pointing at the old place): the old file, with its WAL files, is renamed aside first,
        never deleted. Returns (where the old one went, or None; the ids recorded). Ids are given afresh."""
        aside = None
        if self.path.exists():
            aside = self.path.with_name(f"{DB_NAME}.{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}.bak")
            for suffix in ("", "-wal", "-shm"):  # the write-ahead log belongs to the old file
                old = self.path.with_name(self.path.name + suffix)
                if old.exists():
                    os.replace(old, aside.with_name(aside.name + suffix))
        return aside, self.scan()

    def _find_run_dirs(self, folder: Path, depth: int) -> Iterator[Path]:
        try:
            with os.scandir(folder) as entries:
                children = sorted(Path(e.path) for e in entries if e.is_dir() and not e.name.startswith("."))
        except OSError:
            return
        for child in children:
            if (child / "summary.json").exists() or (child / "config.yaml").exists():
                yield child
            elif depth > 1:
                yield from self._find_run_dirs(child, depth - 1)

    def delete(self, ids: list[int]) -> int:
        """Remove rows (not directories); returns how many were removed."""
        ids = sorted({int(i) for i in ids})
        if not ids:
            return 0
        with self._connect(write=True) as conn:
            cursor = conn.execute(f"DELETE FROM runs WHERE id IN ({', '.join('?' * len(ids))})", ids)
            return cursor.rowcount

    # ------------------------------------------------------------------ reading

    def get(self, run_id: int) -> RunRecord | None:
        if not self.path.exists():
            return None
        with self._connect(write=False) as conn:
            row = conn.execute("SELECT * FROM runs WHERE id = ?", (int(run_id),)).fetchone()
        return None if row is None else RunRecord(**dict(row))

    def query(self, filters: dict[str, Any] | None = None, sort: str = "id", descending: bool = False) -> list[RunRecord]:
        """Runs matching every given filter (None values are ignored), sorted by a column (NULLs last).

        Filters: env (case-insensitive substring of the env id), algo, variant, status, seed, group (exact).
        Sort keys: any column name, or an alias (env, steps, started, ended, eval, best, train, ...).
        """
        filters = {key: value for key, value in (filters or {}).items() if value is not None}
        unknown = sorted(set(filters) - set(FILTERS))
        if unknown:
            raise ConfigError(f"unknown filter {unknown[0]!r}; available: {', '.join(FILTERS)}")
        column = SORT_ALIASES.get(sort, sort)
        if column not in COLUMNS:
            raise ConfigError(f"unknown sort key {sort!r}; available: {', '.join(COLUMNS)} "
                              f"(or {', '.join(sorted(SORT_ALIASES))})")
        where: list[str] = []
        params: list[str | int] = []
        for key, value in filters.items():
            if key == "env":
                where.append("instr(lower(env_id), lower(?)) > 0")
                params.append(str(value))
            elif key == "seed":
                where.append("seed = ?")
                params.append(int(value))
            else:
                where.append(f"{SORT_ALIASES.get(key, key)} = ?")  # group: the trial_group column
                params.append(str(value))
        direction = "DESC" if descending else "ASC"
        sql = (f"SELECT * FROM runs {'WHERE ' + ' AND '.join(where) if where else ''} "
               f"ORDER BY {column} IS NULL, {column} {direction}, id {direction}")
        if not self.path.exists():
            return []
        with self._connect(write=False) as conn:
            return [RunRecord(**dict(row)) for row in conn.execute(sql, params)]


# ---------------------------------------------------------------------- cleaning


def select_for_clean(records: list[RunRecord], keep_best: int, keep_recent_days: float,
                     now: datetime | None = None) -> list[RunRecord]:
    """The runs `runs clean` would delete: not running, not among the `keep_best` highest best_eval_return
    of their (env, algo, variant) group, and started at least `keep_recent_days` ago.

    A run without an evaluation is never among the best; a run with an unknown start time is kept.
    """
    now = now or datetime.now(UTC)
    cutoff = now - timedelta(days=keep_recent_days)
    groups: dict[tuple, list[RunRecord]] = {}
    for record in records:
        groups.setdefault((record.env_id, record.algo, record.variant), []).append(record)
    best: set[int] = set()
    for members in groups.values():
        scored = [(r.best_eval_return, r) for r in members if r.best_eval_return is not None]
        ranked = sorted(scored, key=lambda pair: (-pair[0], pair[1].id))
        best.update(r.id for _, r in ranked[:keep_best])
    chosen = []
    for record in records:
        if record.status == "running" or record.id in best:
            continue
        started = _parse(record.started_at)
        if started is None or started > cutoff:
            continue
        chosen.append(record)
    return chosen


def remove_runs(chosen: list[RunRecord]) -> tuple[list[int], list[str], int]:
    """Delete the run directories of `chosen` (from `select_for_clean`). Returns the ids whose directories are
    gone (deleted now, or already missing), a message for each run kept or not deletable, and how many
    deletions failed. The caller removes the returned ids from the registry."""
    deleted, problems, failures = [], [], 0
    for record in chosen:
        run_dir = Path(record.run_dir)
        if run_dir.exists():
            # Checked again just before deleting: the run may have been resumed since the scan, and a path
            # that no longer holds a run directory is never removed.
            try:
                status = read_run(run_dir)["status"]
            except (OSError, ValueError) as exc:
                problems.append(f"run {record.id}: kept {run_dir}: does not look like a run directory ({exc})")
                continue
            if status == "running":
                problems.append(f"run {record.id}: kept {run_dir}: it is running")
                continue
            try:
                shutil.rmtree(run_dir)
            except OSError as exc:
                problems.append(f"run {record.id}: could not delete {run_dir}: {exc}")
                failures += 1
                continue
        deleted.append(record.id)
    return deleted, problems, failures


def _parse(stamp: str | None) -> datetime | None:
    if stamp is None:
        return None
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)

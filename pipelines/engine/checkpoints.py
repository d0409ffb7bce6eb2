"""Spark's own checkpoint logs, read as plain files: what a query planned, committed and replayed.

A Structured Streaming checkpoint holds `metadata` (the query id, fixed for the checkpoint's
life), `offsets/N` (the write-ahead log: batch N's end offsets, written before the batch runs),
`commits/N` (batch N is done) and `sources/0/0` (where the Kafka source first started). From them:

- the committed offsets: the end offsets of the newest committed batch;
- a batch's Kafka range: from the previous batch's end (or the initial offsets) to its own end;
- replays: a batch planned in the offset log but not committed when the query stopped is run
  again, with the same offsets, by the next run.

No Spark import: the auditor and the dashboard read these from outside the job. The checkpoint
must be on a file system this process can read (local, or a shared mount on a cluster).

A query that starts over on every run (at-most-once, the real-time path) gets a folder of its own
per instance (`fresh_instance`), with the query's usual path a symbolic link to the newest: a
frozen instance that wakes (a zombie) writes only into its own folder, never into the folder its
replacement has just cleared and started in, and every reader of the usual path reads the newest.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from controlplane.ledger import Batch

Offsets = dict  # {topic: {partition (int): offset}}


def _read_log(path: Path) -> list[str]:
    """The lines of one log file after its version line, [] when absent or half-written."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    return lines[1:] if lines and lines[0].startswith("v") else []


def _offsets(text: str) -> Offsets:
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in doc.items()
            if isinstance(parts, dict)}


def _batch_ids(folder: Path) -> list[int]:
    try:
        return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())
    except OSError:
        return []


def query_id(checkpoint: Path | str) -> str | None:
    """The checkpoint's query id (its `metadata` file), None before the query first started."""
    try:
        return json.loads(Path(checkpoint, "metadata").read_text()).get("id")
    except (OSError, ValueError, AttributeError):
        return None


def initial_offsets(checkpoint: Path | str) -> Offsets:
    """Where the Kafka source started this checkpoint (resolved `earliest`/`latest`)."""
    try:
        text = Path(checkpoint, "sources", "0", "0").read_text()
    except (OSError, UnicodeDecodeError):
        return {}
    # the Kafka source writes a version line, then the JSON (older versions: a NUL first)
    body = [ln.strip("\x00 ") for ln in text.splitlines() if ln.strip("\x00 ")]
    return next((_offsets(ln) for ln in reversed(body) if ln.startswith("{")), {})


def batch_end(checkpoint: Path | str, batch_id: int, source: int = 0) -> Offsets:
    """Batch `batch_id`'s end offsets from the offset log ({} when purged or absent)."""
    lines = _read_log(Path(checkpoint, "offsets", str(batch_id)))
    # line 0 is the batch metadata (watermark, timestamp, conf); one line per source after it
    return _offsets(lines[1 + source]) if len(lines) > 1 + source else {}


def batch_timestamp(checkpoint: Path | str, batch_id: int) -> int | None:
    """The batch's own processing time in ms (`current_timestamp()` inside it, kept on replay)."""
    lines = _read_log(Path(checkpoint, "offsets", str(batch_id)))
    try:
        return int(json.loads(lines[0])["batchTimestampMs"]) if lines else None
    except (ValueError, KeyError, TypeError):
        return None


def state_provider(checkpoint: Path | str) -> str | None:
    """The state store class the query's newest planned batch runs with (Spark keeps it in the
    offset log's metadata for the checkpoint's life), None when it names none."""
    newest = planned_batch(checkpoint)
    lines = _read_log(Path(checkpoint, "offsets", str(newest))) if newest is not None else []
    try:
        conf = json.loads(lines[0]).get("conf") or {}
    except (ValueError, IndexError, AttributeError):
        return None
    return conf.get("spark.sql.streaming.stateStore.providerClass")


def batch_range(checkpoint: Path | str, batch_id: int) -> tuple[Offsets, Offsets]:
    """(start, end) offsets of one batch: start inclusive, end exclusive."""
    end = batch_end(checkpoint, batch_id)
    start = batch_end(checkpoint, batch_id - 1) if batch_id > 0 else {}
    return (start or initial_offsets(checkpoint)), end


def committed_batch(checkpoint: Path | str) -> int | None:
    ids = _batch_ids(Path(checkpoint, "commits"))
    return ids[-1] if ids else None


def planned_batch(checkpoint: Path | str) -> int | None:
    ids = _batch_ids(Path(checkpoint, "offsets"))
    return ids[-1] if ids else None


@dataclass(frozen=True)
class Position:
    """Where a query stands now, from its checkpoint alone."""
    query_id: str | None
    committed_batch: int | None
    committed_offsets: Offsets        # end of the newest committed batch, or the initial offsets
    planned_batch: int | None         # > committed_batch: a batch is running, or was cut short

    @property
    def uncommitted(self) -> bool:
        return self.planned_batch is not None and (self.committed_batch is None
                                                   or self.planned_batch > self.committed_batch)


def position(checkpoint: Path | str) -> Position:
    committed = committed_batch(checkpoint)
    offsets = batch_end(checkpoint, committed) if committed is not None else {}
    return Position(query_id(checkpoint), committed, offsets or initial_offsets(checkpoint),
                    planned_batch(checkpoint))


def merge_max(*offsets: Offsets) -> Offsets:
    """Per topic and partition, the furthest of several offset maps."""
    out: Offsets = {}
    for o in offsets:
        for topic, parts in (o or {}).items():
            mine = out.setdefault(topic, {})
            for p, off in parts.items():
                mine[int(p)] = max(mine.get(int(p), off), off)
    return out


def ledger_batch(sink: str, checkpoint: Path | str, batch_id: int):
    """The sink ledger's name for one batch: its checkpoint's query id and Kafka range."""
    start, end = batch_range(checkpoint, batch_id)
    return Batch(sink, query_id(checkpoint) or "", batch_id, start_offsets=start, end_offsets=end)


RUN = ".run-"  # an instance folder's name: the link's, this, its fencing epoch
_INSTANCE = re.compile(re.escape(RUN) + r"[0-9]+$")


def is_instance(folder: Path | str) -> bool:
    """Whether `folder` is one instance's folder of a query that starts over (`fresh_instance`)."""
    return bool(_INSTANCE.search(Path(folder).name))


def instances(link: Path | str) -> list[Path]:
    link = Path(link)
    try:
        return [p for p in link.parent.iterdir() if p.name.startswith(link.name + RUN) and is_instance(p)]
    except OSError:
        return []


def fresh_instance(link: Path | str, instance: int, *, current: bool) -> Path:
    """An empty checkpoint folder for one run of a query that keeps no checkpoint across runs,
    named by its `instance` (its fencing epoch), with `link` pointed at it (swapped in one rename,
    so a reader never finds it missing) when the caller is `current`: it holds the job's newest
    lease. Every other instance's folder then goes: their runs ended, or they are zombies whose
    writes must not land in the folder Spark starts in now (an epoch is compared only through the
    lease: a store made afresh numbers its epochs from 1 again, below a stale folder's). A caller
    that is not current (a zombie restarting its query before its fence ends it) gets its own empty
    folder and touches nothing else."""
    link = Path(link)
    folder = link.with_name(f"{link.name}{RUN}{int(instance)}")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if not current:
        return folder
    if link.is_dir() and not link.is_symlink():  # a folder of a release before instance folders
        shutil.rmtree(link)
    tmp = link.with_name(f".{link.name}.{os.getpid()}.link")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(folder.name)  # relative: the checkpoint root can move
    os.replace(tmp, link)
    for old in instances(link):
        if old != folder:
            shutil.rmtree(old, ignore_errors=True)
    return folder


def clear(link: Path | str) -> None:
    """Remove a query's checkpoint: a plain folder, or the link and every instance's folder."""
    link = Path(link)
    if link.is_symlink():
        link.unlink(missing_ok=True)
    else:
        shutil.rmtree(link, ignore_errors=True)
    for old in instances(link):
        shutil.rmtree(old, ignore_errors=True)

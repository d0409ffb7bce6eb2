"""Spark's own checkpoint logs, read as plain files: what a query planned, committed and replayed.

A Structured Streaming checkpoint holds `metadata` (the query id, fixed for the checkpoint's
life), `offsets/N` (the write-ahead log: batch N's end offsets, written before the batch runs),
`commits/N` (batch N is done) and `sources/0/0` (where the Kafka source first started). From them:

- the committed offsets: the end offsets of the newest committed batch;
- a batch's Kafka range: from the previous batch's end (or the initial offsets) to its own end;
- replays: a batch planned in the offset log but not committed when the query stopped is run
  again, with the same offsets, by the next run.

No Spark import: the auditor and the dashboard read these from outside the job, through
`infra.storage`: a local folder as files, an hdfs:// one over WebHDFS. A checkpoint is a local
Path or a storage Location (a URI), joined with `/` either way.

A query that starts over on every run (at-most-once, the real-time path) gets a folder of its own
per instance (`fresh_instance`); the query's usual path is a folder holding one small file,
`INSTANCE`, naming the newest (replaced whole, by rename, so a reader finds the old name or the
new). A frozen instance that wakes (a zombie) writes only into its own folder, never into the
folder its replacement has just cleared and started in, and every reader of the usual path reads
the newest (`resolve`). A pointer file rather than a symbolic link: HDFS and object stores have none.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from controlplane.ledger import Batch
from infra import storage
from infra.storage import Place

Offsets = dict  # {topic: {partition (int): offset}}
POINTER = "INSTANCE"  # in a fresh-instance query's usual folder: the newest instance folder's name


def _place(checkpoint) -> Place:
    """A Path or a Location as given; a string read as either (infra.storage.location)."""
    return checkpoint if isinstance(checkpoint, (Path, storage.Location)) else storage.location(checkpoint)


def resolve(checkpoint) -> Place:
    """The folder Spark writes for `checkpoint`: the newest instance its INSTANCE file names, or
    the folder itself (a query that keeps its checkpoint, or an instance's own folder)."""
    folder = _place(checkpoint)
    name = (storage.read_text(folder / POINTER) or "").strip()
    return folder.with_name(name) if name and _INSTANCE.search(name) else folder


def _read_log(path: Place) -> list[str]:
    """The lines of one log file after its version line, [] when absent or half-written."""
    lines = (storage.read_text(path) or "").splitlines()
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


def _batch_ids(folder: Place) -> list[int]:
    return sorted(int(e.name) for e in storage.entries(folder) if e.name.isdigit())


def query_id(checkpoint) -> str | None:
    """The checkpoint's query id (its `metadata` file), None before the query first started."""
    return _query_id(resolve(checkpoint))


def _query_id(folder: Place) -> str | None:
    try:
        return json.loads(storage.read_text(folder / "metadata") or "").get("id")
    except (ValueError, AttributeError):
        return None


def initial_offsets(checkpoint) -> Offsets:
    """Where the Kafka source started this checkpoint (resolved `earliest`/`latest`)."""
    return _initial_offsets(resolve(checkpoint))


def _initial_offsets(folder: Place) -> Offsets:
    text = storage.read_text(folder / "sources" / "0" / "0")
    if text is None:
        return {}
    # the Kafka source writes a version line, then the JSON (older versions: a NUL first)
    body = [ln.strip("\x00 ") for ln in text.splitlines() if ln.strip("\x00 ")]
    return next((_offsets(ln) for ln in reversed(body) if ln.startswith("{")), {})


def batch_end(checkpoint, batch_id: int, source: int = 0) -> Offsets:
    """Batch `batch_id`'s end offsets from the offset log ({} when purged or absent)."""
    return _batch_end(resolve(checkpoint), batch_id, source)


def _batch_end(folder: Place, batch_id: int, source: int = 0) -> Offsets:
    lines = _read_log(folder / "offsets" / str(batch_id))
    # line 0 is the batch metadata (watermark, timestamp, conf); one line per source after it
    return _offsets(lines[1 + source]) if len(lines) > 1 + source else {}


def batch_timestamp(checkpoint, batch_id: int) -> int | None:
    """The batch's own processing time in ms (`current_timestamp()` inside it, kept on replay)."""
    lines = _read_log(resolve(checkpoint) / "offsets" / str(batch_id))
    try:
        return int(json.loads(lines[0])["batchTimestampMs"]) if lines else None
    except (ValueError, KeyError, TypeError):
        return None


def state_provider(checkpoint) -> str | None:
    """The state store class the query's newest planned batch runs with (Spark keeps it in the
    offset log's metadata for the checkpoint's life), None when it names none."""
    newest = planned_batch(checkpoint)
    lines = _read_log(resolve(checkpoint) / "offsets" / str(newest)) if newest is not None else []
    try:
        conf = json.loads(lines[0]).get("conf") or {}
    except (ValueError, IndexError, AttributeError):
        return None
    return conf.get("spark.sql.streaming.stateStore.providerClass")


def batch_range(checkpoint, batch_id: int) -> tuple[Offsets, Offsets]:
    """(start, end) offsets of one batch: start inclusive, end exclusive."""
    folder = resolve(checkpoint)
    end = _batch_end(folder, batch_id)
    start = _batch_end(folder, batch_id - 1) if batch_id > 0 else {}
    return (start or _initial_offsets(folder)), end


def committed_batch(checkpoint) -> int | None:
    ids = _batch_ids(resolve(checkpoint) / "commits")
    return ids[-1] if ids else None


def planned_batch(checkpoint) -> int | None:
    ids = _batch_ids(resolve(checkpoint) / "offsets")
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


def position(checkpoint) -> Position:
    folder = resolve(checkpoint)
    committed = committed_batch(folder)
    offsets = _batch_end(folder, committed) if committed is not None else {}
    return Position(_query_id(folder), committed, offsets or _initial_offsets(folder), planned_batch(folder))


def merge_max(*offsets: Offsets) -> Offsets:
    """Per topic and partition, the furthest of several offset maps."""
    out: Offsets = {}
    for o in offsets:
        for topic, parts in (o or {}).items():
            mine = out.setdefault(topic, {})
            for p, off in parts.items():
                mine[int(p)] = max(mine.get(int(p), off), off)
    return out


def ledger_batch(sink: str, checkpoint, batch_id: int):
    """The sink ledger's name for one batch: its checkpoint's query id and Kafka range."""
    folder = resolve(checkpoint)
    start, end = batch_range(folder, batch_id)
    return Batch(sink, _query_id(folder) or "", batch_id, start_offsets=start, end_offsets=end)


RUN = ".run-"  # an instance folder's name: the usual folder's, this, its fencing epoch
_INSTANCE = re.compile(re.escape(RUN) + r"[0-9]+$")


def is_instance(folder) -> bool:
    """Whether `folder` is one instance's folder of a query that starts over (`fresh_instance`)."""
    return bool(_INSTANCE.search(_place(folder).name))


def instances(link) -> list[Place]:
    """Every instance folder of the query whose usual folder is `link`."""
    link = _place(link)
    return [link.with_name(e.name) for e in storage.entries(link.parent)
            if e.name.startswith(link.name + RUN) and _INSTANCE.search(e.name)]


def fresh_instance(link, instance: int, *, current: bool) -> Place:
    """An empty checkpoint folder for one run of a query that keeps no checkpoint across runs,
    named by its `instance` (its fencing epoch), and named in `link`'s INSTANCE file (replaced
    whole, so a reader never finds it missing) when the caller is `current`: it holds the job's
    newest lease. Every other instance's folder then goes: their runs ended, or they are zombies
    whose writes must not land in the folder Spark starts in now (an epoch is compared only
    through the lease: a store made afresh numbers its epochs from 1 again, below a stale
    folder's). A caller that is not current (a zombie restarting its query before its fence ends
    it) gets its own empty folder and touches nothing else."""
    link = _place(link)
    folder = link.with_name(f"{link.name}{RUN}{int(instance)}")
    storage.remove(folder)
    storage.make_dirs(folder)
    if not current:
        return folder
    _as_pointer_folder(link)
    storage.write_text(link / POINTER, folder.name)
    for old in instances(link):
        if old.name != folder.name:
            storage.remove(old)
    return folder


def _as_pointer_folder(link: Place) -> None:
    """Make `link` a folder that holds only the INSTANCE file: a symbolic link or a whole
    checkpoint of an older release goes."""
    entry = storage.stat(link)
    if isinstance(link, Path) and link.is_symlink():
        link.unlink()
    elif entry is not None and (not entry.is_dir or any(e.name != POINTER for e in storage.entries(link))):
        storage.remove(link)
    storage.make_dirs(link)


def clear(link) -> None:
    """Remove a query's checkpoint: a plain folder, or the usual folder and every instance's."""
    link = _place(link)
    storage.remove(link)
    for old in instances(link):
        storage.remove(old)

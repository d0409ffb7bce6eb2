"""A query that starts over on every run (at-most-once, the real-time path) runs in a folder of its
own per instance, named by an INSTANCE file in the query's usual folder (`checkpoints.fresh_instance`):
a woken zombie's offsets land in its own folder, never in the one its replacement has just started in."""
from pathlib import Path

from pipelines.engine import checkpoints


def write_batch(folder: Path, batch_id: int, end: int, committed: bool = True) -> None:
    """Spark's files for one batch of a one-partition topic `t`."""
    (folder / "offsets").mkdir(parents=True, exist_ok=True)
    (folder / "commits").mkdir(parents=True, exist_ok=True)
    (folder / "metadata").write_text(f'{{"id":"q-{folder.name}"}}')
    (folder / "offsets" / str(batch_id)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{{"t":{{"0":{end}}}}}')
    if committed:
        (folder / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_a_zombies_writes_after_its_replacement_started_stay_in_the_zombies_folder(tmp_path):
    link = tmp_path / "usage-at-most-once"
    zombie = checkpoints.fresh_instance(link, 6, current=True)
    write_batch(zombie, 57, 900)
    assert checkpoints.position(link).committed_batch == 57

    replacement = checkpoints.fresh_instance(link, 7, current=True)
    assert replacement != zombie and not zombie.exists()  # the older instance's folder went
    assert list(replacement.iterdir()) == []             # Spark starts on an empty folder
    assert checkpoints.position(link).query_id is None   # readers of the usual path see the newest

    # the zombie wakes: its Spark still holds its own path and writes its next batch there
    write_batch(zombie, 58, 950, committed=False)
    write_batch(replacement, 0, 960)
    assert sorted(p.name for p in (replacement / "offsets").iterdir()) == ["0"]
    pos = checkpoints.position(link)
    assert (pos.query_id, pos.committed_batch, pos.committed_offsets) == (f"q-{replacement.name}", 0, {"t": {0: 960}})


def test_a_zombie_restarting_its_query_leaves_the_newer_instance_and_the_link_alone(tmp_path):
    link = tmp_path / "usage-at-most-once"
    replacement = checkpoints.fresh_instance(link, 7, current=True)
    write_batch(replacement, 4, 300)
    zombie = checkpoints.fresh_instance(link, 6, current=False)  # its runner restarting the query, not yet fenced
    assert list(zombie.iterdir()) == []
    assert checkpoints.position(link).committed_batch == 4 and checkpoints.resolve(link) == replacement
    assert (replacement / "commits" / "4").exists()
    checkpoints.fresh_instance(link, 8, current=True)  # the next instance clears both older ones
    assert sorted(p.name for p in tmp_path.iterdir()) == ["usage-at-most-once", "usage-at-most-once.run-8"]


def test_a_stale_folder_with_a_larger_epoch_goes_when_the_lease_holder_starts(tmp_path):
    # a run killed at epoch 9, then its store made afresh: the next lease is epoch 1
    link = tmp_path / "usage-at-most-once"
    stale = checkpoints.fresh_instance(link, 9, current=True)
    write_batch(stale, 12, 500)
    folder = checkpoints.fresh_instance(link, 1, current=True)
    assert checkpoints.resolve(link) == folder and not stale.exists()
    assert checkpoints.position(link).query_id is None


def test_a_restart_of_the_same_instance_starts_on_an_empty_folder_again(tmp_path):
    link = tmp_path / "fraud" / "realtime"
    first = checkpoints.fresh_instance(link, 5, current=True)
    write_batch(first, 3, 40)
    again = checkpoints.fresh_instance(link, 5, current=True)
    assert again == first and list(again.iterdir()) == []
    assert checkpoints.resolve(link) == again


def test_a_plain_folder_of_an_older_release_is_replaced_and_clear_removes_everything(tmp_path):
    link = tmp_path / "usage-at-most-once"
    write_batch(link, 9, 100)  # a plain folder, as releases before instance folders left it
    folder = checkpoints.fresh_instance(link, 2, current=True)
    assert (link / "INSTANCE").read_text() == folder.name and [p.name for p in link.iterdir()] == ["INSTANCE"]
    assert checkpoints.position(link).committed_batch is None
    assert checkpoints.is_instance(folder) and not checkpoints.is_instance(link)
    write_batch(folder, 0, 5)
    stray = tmp_path / "usage-at-most-once.run-1"  # recreated by a zombie's late write
    write_batch(stray, 10, 110)
    other = tmp_path / "usage-at-least-once"
    write_batch(other, 0, 5)

    checkpoints.clear(link)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["usage-at-least-once"]
    checkpoints.clear(link)  # nothing left to clear: no error
    checkpoints.clear(other)
    assert list(tmp_path.iterdir()) == []


def test_a_symbolic_link_of_an_older_release_becomes_the_instance_folder(tmp_path):
    link = tmp_path / "usage-at-most-once"
    old = tmp_path / "usage-at-most-once.run-3"
    write_batch(old, 2, 20)
    link.symlink_to(old.name)
    folder = checkpoints.fresh_instance(link, 4, current=True)
    assert not link.is_symlink() and checkpoints.resolve(link) == folder and not old.exists()

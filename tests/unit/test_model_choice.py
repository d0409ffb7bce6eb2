"""Which model the fraud job serves at its start (`models.serving`): the version a `use-model`
chose, kept across its restarts and a standby's takeover, else the newest. Real SQLite, the job's
own `ModelSwitch.record`; no model files are loaded here (the e2e test tests/e2e/test_model_swap.py
restarts a real job after a switch)."""
from __future__ import annotations

import json

import pytest

from controlplane import fencing
from controlplane.store import connect
from pipelines.fraud import models
from pipelines.fraud.job import JOB, ModelSwitch


def version(db, path: str) -> int:
    return models.register(db, {"kind": "logistic-regression", "params": "{}",
                                "features": json.dumps(list(models.MODEL_FEATURES)), "train_from": "2018-07-25",
                                "train_to": "2018-07-31", "as_of": "2018-08-08T00:00:00", "threshold": 0.5,
                                "validation": "{}", "candidates": "[]", "path": path, "train_rows": 1,
                                "train_frauds": 1, "fit_s": 0.0, "created_at": 0})


@pytest.fixture
def db(tmp_path):
    store = connect(tmp_path / "cardstream.db")
    yield store
    store.conn.close()


def start(db) -> ModelSwitch:
    """A start of the job (or a standby's takeover): a new epoch, the model it serves recorded."""
    return ModelSwitch(db, fencing.take_lease(db, JOB), models.serving(db, JOB))


def test_without_a_choice_a_start_serves_the_newest(db):
    assert models.chosen(db, JOB) is None
    assert models.serving(db, JOB) == models.Loaded(models.RULES)  # no version yet: the rules, no sentence
    start(db)
    use = db["model_use"].get(JOB)
    assert (use["version"], use["chosen"]) == (models.RULES, None)


def test_a_roll_back_to_the_rules_survives_a_restart(db):
    first = start(db)
    first.model = models.Loaded(models.RULES)
    first.record(chosen=True)  # what a use-model --version 0 records after its switch
    version(db, "/nowhere/v1")  # a model trained afterwards: newer, but not chosen
    start(db)  # the crash's restart: no model file is read, the chosen rules serve again
    use = db["model_use"].get(JOB)
    assert (use["version"], use["chosen"], use["why"]) == (models.RULES, models.RULES, None)
    assert use["epoch"] == 2


def test_a_chosen_version_that_cannot_be_loaded_says_it_was_chosen(db):
    switch = start(db)
    switch.model = models.Loaded(7)  # chosen, then its row was deleted from the store
    switch.record(chosen=True)
    loaded = models.serving(db, JOB)
    assert loaded.version == models.RULES
    assert loaded.why == ("model 7 (chosen with use-model) is not in the store; deciding with the rules (model 0)")
    start(db)
    use = db["model_use"].get(JOB)
    assert (use["version"], use["chosen"]) == (models.RULES, 7)  # the choice stays for when it is back
    assert "chosen with use-model" in use["why"]


def test_a_standby_serves_the_version_it_loaded_while_it_waited_only_while_it_is_still_the_one(db):
    path = "/models/v1"
    v1 = version(db, path)
    ready = models.Loaded(v1, pipeline=object(), threshold=0.5, path=path)  # loaded by the standby
    assert models.serving(db, JOB, ready) is ready  # the newest, from that folder: not loaded again
    switch = start(db)
    switch.model = models.Loaded(models.RULES)
    switch.record(chosen=True)  # the active rolled back to the rules while the standby waited
    assert models.serving(db, JOB, ready) == models.Loaded(models.RULES)


def test_a_waiting_standby_loads_again_when_the_version_to_serve_changes(db):
    loads = []

    def load(db, job):  # what models.serving loads, without reading model files
        loads.append(models.to_serve(db, job))
        return models.Loaded(loads[-1][0], path=loads[-1][1])

    v1 = version(db, "/models/v1")
    held = models.Held(db, JOB, load)
    assert (held.model.version, loads) == (v1, [(v1, "/models/v1")])
    assert held.refresh() is False and len(loads) == 1  # nothing changed: nothing loaded
    v2 = version(db, "/models/v2")  # trained while the standby waits: now the newest
    assert held.refresh() is True and (held.model.version, held.model.path) == (v2, "/models/v2")
    assert models.serving(db, JOB, held.model) is held.model  # the takeover serves it as loaded
    switch = start(db)
    switch.model = models.Loaded(v1)
    switch.record(chosen=True)  # the active rolls back to v1
    assert held.refresh() is True and held.model.version == v1
    assert held.refresh() is False and len(loads) == 3


def test_a_version_whose_files_are_still_being_saved_is_not_the_newest(db):
    v1 = version(db, "/models/v1")
    v2 = version(db, "")  # save_version registered it and is writing its files
    assert models.to_serve(db, JOB) == (v1, "/models/v1")
    db.execute("UPDATE models SET path = '/models/v2' WHERE version = ?", [v2])
    assert models.to_serve(db, JOB) == (v2, "/models/v2")

# CardStream: `make demo` runs it all, `make test` tests it all. Both install what they need first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
TEST_RUN_DIR := $(CURDIR)/.run/test
export PYTHONPATH := $(CURDIR)

.PHONY: setup jars browser kafka-up kafka-down cluster-up cluster-down test test-fast demo bench clean

setup: $(VENV)/.installed jars

$(VENV)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "CardStream needs Python 3.10 or newer; this is " + sys.version.split()[0] + ".")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing Python packages into $(VENV) ..."
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -r requirements.txt || { echo "pip could not install requirements.txt (see above)."; exit 1; }
	@touch $@

jars: $(VENV)/.installed
	@$(PY) -m infra.jars
	@$(PY) -m infra.broker archive
	@$(PY) -m pipelines.engine.cds

browser:
	@infra/install-chromium.sh

kafka-up: setup
	@$(PY) -m infra.broker up

kafka-down:
	@if [ -x $(PY) ]; then $(PY) -m infra.broker down; else echo "nothing to stop: run make setup first."; fi

# The local cluster: Kafka brokers, HDFS (a NameNode and a DataNode holding every checkpoint), a
# Spark standalone master and its workers, all on 127.0.0.1 (infra/cluster.py, infra/hdfs.py).
# `make demo CLUSTER=1` starts it too and runs the jobs on it.
cluster-up cluster-down: export CLUSTER := 1

cluster-up: setup
	@$(PY) -m infra.cluster up

cluster-down:
	@if [ -x $(PY) ]; then $(PY) -m infra.cluster down; else echo "nothing to stop: run make setup first."; fi

# The test session starts its own broker (port 19092, data under .run/test) and stops it. The
# tests run in TEST_LANES lanes (pytest-xdist workers; each test file whole in one lane, the second
# lane with its own broker, ports and run folder .run/test/lane-1: tests/conftest.py); TEST_LANES=0
# runs them one after another in one process. The last lines make sure nothing of the run is left:
# the broker and the cluster tier's HDFS, Spark master and workers are stopped even when pytest itself
# was killed, and any other process of the run (a Spark JVM, a job, Streamlit, Chromium) is named
# and stopped, which fails the run.
TEST_LANES ?= 2
test: setup browser
	@rm -rf $(TEST_RUN_DIR)
	@$(PY) -m pytest -n $(TEST_LANES) --dist loadfile $(PYTEST_ARGS); rc=$$?; \
	  for d in $(TEST_RUN_DIR) $(TEST_RUN_DIR)/lane-*; do \
	    [ -d $$d ] && CARDSTREAM_RUN_DIR=$$d $(PY) -m infra.cluster down >/dev/null; done; \
	  $(PY) -m infra.leftovers --marker=$(TEST_RUN_DIR) --kill || rc=1; exit $$rc

# The unit tier alone: no broker, no Spark, no browser (under two minutes).
test-fast: $(VENV)/.installed
	@$(PY) -m pytest -m unit $(PYTEST_ARGS)

demo: setup
	@$(PY) -m infra.procfile start

clean: kafka-down
	rm -rf .run

"""The test session's own settings (tests/harness/environment.py): the shell's are not used."""
import os
import subprocess
import sys

from infra.config import ROOT
from tests.harness.environment import KEPT, own_settings, settings_variables
from tests.unit.test_docs import variables_read


def test_the_settings_removed_are_every_variable_the_configuration_reads():
    """The names `load` asks for as it runs, against those its source reads (test_docs' parser):
    a setting read only on some path would be missing from the first."""
    assert settings_variables() == set(variables_read()) | {"SPARK_SUBMIT_OPTS"}
    assert {"SPARK_UI", "FRAUD_MODE", "KAFKA_BOOTSTRAP", "CARDSTREAM_DB", "SPARK_DRIVER_MEMORY"} <= settings_variables()
    assert KEPT < settings_variables()


def test_the_shells_settings_go_and_places_and_ports_stay():
    env = {"SPARK_UI": "0", "FRAUD_MODE": "realtime", "KAFKA_BOOTSTRAP": "elsewhere:9092", "PATH": "/bin",
           "KAFKA_PORT": "29092", "CARDSTREAM_RUN_DIR": "/tmp/x", "JAVA_HOME": "/jdk"}
    removed = own_settings(env)
    assert removed == {"FRAUD_MODE": "realtime", "KAFKA_BOOTSTRAP": "elsewhere:9092", "SPARK_UI": "0"}
    assert env == {"PATH": "/bin", "KAFKA_PORT": "29092", "CARDSTREAM_RUN_DIR": "/tmp/x", "JAVA_HOME": "/jdk"}


def test_a_pytest_run_from_a_shell_with_settings_exported_does_not_see_them(tmp_path):
    """The conftest itself, in a pytest run of its own: the exported settings are named in the
    header and absent in the test, the tests' own defaults in their place."""
    probe = tmp_path / "probe_environment.py"
    probe.write_text("import os\n\ndef test_probe():\n"
                     "    assert not {'FRAUD_MODE', 'CARDSTREAM_DB', 'SPARK_UI'} & set(os.environ)\n"
                     "    assert os.environ['TOPIC_PARTITIONS'] == '2'\n"
                     "    assert os.environ['KAFKA_PORT'] == '29999'\n")
    shell = {k: v for k, v in os.environ.items() if k not in settings_variables()}  # this session's own went
    env = {**shell, "FRAUD_MODE": "realtime", "CARDSTREAM_DB": str(tmp_path / "demo.db"), "SPARK_UI": "0",
           "TOPIC_PARTITIONS": "8", "KAFKA_PORT": "29999", "CARDSTREAM_RUN_DIR": str(tmp_path / "run")}
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS"):
        env.pop(name, None)
    # the suite's conftest as a plugin, over a test file outside the suite
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.conftest",
                          "-c", str(ROOT / "pytest.ini"), "--rootdir", str(ROOT), str(probe)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "not used by the tests: CARDSTREAM_DB, FRAUD_MODE, SPARK_UI, TOPIC_PARTITIONS" in run.stdout

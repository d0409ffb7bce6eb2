"""infra.hdfs's plain parts: the ports, the configuration it writes, the command its daemons run
(which names the run folder, so `make test`'s leftover check and `cluster down` find them), and
the Hadoop version its pom fetches (PySpark's own)."""
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pyspark

from infra import hdfs, leftovers
from infra.config import ROOT, load


def test_ports_and_configuration_are_on_loopback_under_the_run_folder(tmp_path):
    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "HDFS_PORT": "39520"})
    assert list(hdfs.ports(s).values()) == [39520, 39521, 39522, 39523, 39524]
    assert hdfs.web_url(s) == "http://127.0.0.1:39521" and s.hdfs_uri == "hdfs://127.0.0.1:39520"
    sites = hdfs.site_properties(s)
    assert sites["core-site.xml"]["fs.defaultFS"] == "hdfs://127.0.0.1:39520"
    site = sites["hdfs-site.xml"]
    addresses = [v for k, v in site.items() if k.endswith("address")]
    assert addresses and all(a.startswith("127.0.0.1:") for a in addresses)
    assert site["dfs.namenode.name.dir"].startswith(str(tmp_path)) and site["dfs.replication"] == "1"
    doc = ET.fromstring(hdfs.site_xml({"a": "x<y", "b": "1"}))
    assert [(p.findtext("name"), p.findtext("value")) for p in doc.iter("property")] == [("a", "x<y"), ("b", "1")]


def test_the_daemons_command_names_the_run_folder(tmp_path):
    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "HDFS_HEAP": "128m", "HDFS_JVM_OPTS": "-XX:TieredStopAtLevel=1"})
    cmd = hdfs.command(s, hdfs.NAMENODE_CLASS)
    assert cmd[:3] == ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1"] and cmd[-1] == hdfs.NAMENODE_CLASS
    assert cmd[cmd.index("-cp") + 1].startswith(f"{tmp_path}/hdfs/conf:")
    assert str(tmp_path) in " ".join(cmd)  # what infra.leftovers --marker looks for
    assert hdfs.pids(s) == {"namenode": [], "datanode": []} and leftovers.leftovers(str(tmp_path)) == []
    assert hdfs.is_ours(s, f"{s.hdfs_uri}/cardstream") and not hdfs.is_ours(s, f"{s.hdfs_uri}0/x")


def test_the_pom_fetches_pysparks_hadoop_version():
    bundled = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    assert bundled, "PySpark bundles no hadoop-client-api jar"
    version = re.search(r"hadoop-client-api-(.+)\.jar", bundled[0].name).group(1)
    pom = (ROOT / "infra" / "hadoop" / "pom.xml").read_text()
    assert f"<hadoop.version>{version}</hadoop.version>" in pom

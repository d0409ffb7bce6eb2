"""The README's reference tables agree with the code they document (after sqlite-utils' docs tests).

- The "Faults" table lists exactly the catalogue's faults (`controlplane.faults.FAULTS`), each
  with its targets, its parameters and defaults, and the catalogue's own sentence.
- The "Configuration" table lists exactly the environment variables CardStream reads: every
  `env.get("NAME"` / `_int(env, "NAME"` / `_float(env, "NAME"` of `infra/config.py` (read from
  its source, so a new setting cannot go undocumented) and `CARDSTREAM_LOG_LEVEL` of
  `infra/logs.py`, each with the default the code gives it.
"""
from __future__ import annotations

import ast
import re

import pytest

from controlplane import faults
from infra.config import ROOT

README = ROOT / "README.md"
ENV_SOURCES = (ROOT / "infra" / "config.py", ROOT / "infra" / "logs.py")
UNSET = object()       # read without a default: README says "unset"
COMPUTED = object()    # a default computed from other settings (paths): README explains it in words


def section(title: str) -> list[str]:
    """The lines of the README section whose `## ` heading starts with `title`."""
    lines = README.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("## ") and line[3:].startswith(title)]
    assert len(starts) == 1, f"README has {len(starts)} sections titled {title!r}"
    body = lines[starts[0] + 1:]
    end = next((i for i, line in enumerate(body) if line.startswith("## ")), len(body))
    return body[:end]


def table(title: str, header: tuple[str, ...]) -> list[list[str]]:
    """The rows of the first table in the section, after checking its header."""
    rows = [line for line in section(title) if line.startswith("|")]
    assert rows, f"no table in the README section {title!r}"
    cells = [[c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]] for row in rows]
    assert tuple(c.lower() for c in cells[0]) == header, cells[0]
    assert all(set(c) <= set("-: ") for c in cells[1]), "the second line is the header rule"
    for row in cells[2:]:
        assert len(row) == len(header), row
    return cells[2:]


def plain(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def ticked(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


# ------------------------------------------------------------------ faults

def fault_rows() -> dict[str, list[str]]:
    rows = table("Faults", ("fault", "targets (default first)", "parameters", "what happens"))
    out = {}
    for row in rows:
        [kind] = ticked(row[0])
        assert kind not in out, f"{kind} is listed twice"
        out[kind] = row
    return out


def test_the_fault_table_lists_exactly_the_catalogue_s_faults():
    listed = list(fault_rows())
    assert sorted(listed) == sorted(faults.FAULTS), (
        f"missing: {sorted(set(faults.FAULTS) - set(listed))}, not faults: {sorted(set(listed) - set(faults.FAULTS))}")
    assert listed == list(faults.FAULTS), "in the catalogue's order"


@pytest.mark.parametrize("kind", faults.FAULTS)
def test_each_fault_row_says_what_the_catalogue_says(kind):
    f = faults.CATALOGUE[kind]
    _, targets, params, says = fault_rows()[kind]
    assert plain(says) == plain(f.sentence)
    assert plain(targets) == (", ".join(f.jobs) if f.jobs else f.target)
    names = [t for t in ticked(params)]
    assert names == [p.name for p in f.params], (kind, params)
    for p in f.params:
        if p.default is not None:
            assert f"`{p.name}` = {p.default:g}" in params, (kind, p.name, params)
    if not f.params:
        assert plain(params) == "none"


# ------------------------------------------------------------------ configuration

def _default(call: ast.Call, parents: dict) -> object:
    """The default the code gives a variable: the call's own default, or what follows `or`."""
    if call.func.__class__ is ast.Name:          # _int(env, "NAME", default) / _float(...)
        node = call.args[2]
    elif len(call.args) > 1:                       # env.get("NAME", default)
        node = call.args[1]
    else:                                          # env.get("NAME") or <default>
        parent = parents.get(call)
        if not isinstance(parent, ast.BoolOp) or not isinstance(parent.op, ast.Or):
            return UNSET
        after = parent.values[parent.values.index(call) + 1:]
        if not after:
            return UNSET
        node = after[0]
    try:
        value = eval(compile(ast.Expression(node), "<default>", "eval"), {"__builtins__": {}})  # 24 * 60
    except NameError:
        return COMPUTED
    return UNSET if value is None else value


def variables_read() -> dict[str, object]:
    """{NAME: default} of every environment variable the configuration code reads."""
    found: dict[str, object] = {}
    for path in ENV_SOURCES:
        tree = ast.parse(path.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("_int", "_float") and len(node.args) == 3:
                name = node.args[1]
            elif isinstance(func, ast.Attribute) and func.attr == "get" and node.args and (
                    (isinstance(func.value, ast.Name) and func.value.id == "env")
                    or (isinstance(func.value, ast.Attribute) and func.value.attr == "environ")):
                name = node.args[0]
            else:
                continue
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value.isupper():
                found[name.value] = _default(node, parents)
    return found


def config_rows() -> list[tuple[list[str], list[str]]]:
    """(variables, defaults) per row of the configuration table."""
    out = []
    for variables, defaults, what in table("Configuration", ("variable", "default", "what")):
        names = ticked(variables)
        values = [d.strip() for d in defaults.split(",")] if len(names) > 1 else [defaults.strip()]
        assert names and what, variables
        assert len(values) == len(names), f"one default per variable: {variables} | {defaults}"
        out.append((names, values))
    return out


def test_the_parser_finds_the_settings_it_should():
    read = variables_read()
    assert len(read) > 30
    assert read["KAFKA_PORT"] == 9092 and read["STATE_TTL_MINUTES"] == 24 * 60
    assert read["KAFKA_SECURITY_PROTOCOL"] == "PLAINTEXT" and read["KAFKA_HEAP"] == "768m"
    assert read["KAFKA_BOOTSTRAP"] is UNSET and read["CARDSTREAM_DB"] is COMPUTED
    assert read["CARDSTREAM_LOG_LEVEL"] == "INFO"


def test_the_configuration_table_lists_exactly_the_variables_read():
    documented = [name for names, _ in config_rows() for name in names]
    assert len(documented) == len(set(documented)), "a variable is listed twice"
    read = variables_read()
    assert sorted(documented) == sorted(read), (
        f"undocumented: {sorted(set(read) - set(documented))}, not read: {sorted(set(documented) - set(read))}")


def test_each_documented_default_is_the_code_s():
    read = variables_read()
    for names, values in config_rows():
        for name, shown in zip(names, values):
            want, shown = read[name], shown.replace("`", "")
            if want is COMPUTED:
                continue
            if want is UNSET:
                assert shown == "unset", (name, shown)
            elif isinstance(want, (int, float)):
                assert float(shown) == float(want), (name, shown, want)
            else:
                assert shown == want, (name, shown, want)

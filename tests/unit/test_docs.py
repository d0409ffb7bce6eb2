"""The docs agree with the code they document, and every link in them leads somewhere (after
sqlite-utils' docs tests).

- docs/faults.md, "The catalogue": exactly the catalogue's faults (`controlplane.faults.FAULTS`), in
  its order, each with its targets, its parameters and defaults, and the catalogue's own sentence.
- docs/configuration.md, "Settings": exactly the environment variables CardStream reads: every
  variable `infra/config.py` and `infra/logs.py` read (found in their source, so a new setting cannot
  go undocumented), each with the default the code gives it.
- README.md, docs/**/*.md and bench/RESULTS.md: every link to a file of the repository reaches one
  that exists, and every `#anchor` a heading of its page, by GitHub's slug rules (lowercase,
  punctuation removed, each space a hyphen, a repeated heading numbered).
- README.md: a newcomer's page: at most 200 lines, dated only in its figures table, and no picture
  taken over a seeded store.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from controlplane import faults
from infra.config import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
RESULTS = ROOT / "bench" / "RESULTS.md"
FAULTS_DOC = (DOCS / "faults.md", "The catalogue")
SETTINGS_DOC = (DOCS / "configuration.md", "Settings")
ENV_SOURCES = (ROOT / "infra" / "config.py", ROOT / "infra" / "logs.py")
UNSET = object()       # read without a default: the table says "unset"
COMPUTED = object()    # a default computed from other settings (paths, the cluster): said in words


def section(path: Path, title: str) -> list[str]:
    """The lines of the `## ` section of `path` whose heading starts with `title`."""
    lines = path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("## ") and line[3:].startswith(title)]
    assert len(starts) == 1, f"{path.relative_to(ROOT)} has {len(starts)} sections titled {title!r}"
    body = lines[starts[0] + 1:]
    end = next((i for i, line in enumerate(body) if line.startswith("## ")), len(body))
    return body[:end]


def split_row(row: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def table(where: tuple[Path, str], header: tuple[str, ...]) -> list[list[str]]:
    """The rows of the first table in the section, after checking its header."""
    path, title = where
    rows = [line for line in section(path, title) if line.startswith("|")]
    assert rows, f"no table in {path.relative_to(ROOT)}, section {title!r}"
    cells = [split_row(row) for row in rows]
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
    rows = table(FAULTS_DOC, ("fault", "targets (default first)", "parameters", "what happens"))
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

def _value(node: ast.AST) -> object:
    try:
        value = eval(compile(ast.Expression(node), "<default>", "eval"), {"__builtins__": {}})  # 24 * 60
    except (NameError, AttributeError, TypeError):
        return COMPUTED
    return UNSET if value is None else value


def _or_default(call: ast.AST, parents: dict) -> object:
    """`env.get("NAME") or <default>`: what follows `or`, else unset."""
    parent = parents.get(call)
    if not isinstance(parent, ast.BoolOp) or not isinstance(parent.op, ast.Or):
        return UNSET
    after = parent.values[parent.values.index(call) + 1:]
    return _value(after[0]) if after else UNSET


def _is_env(node: ast.AST) -> bool:
    """`env` (the mapping config.load reads) or `os.environ`."""
    return (isinstance(node, ast.Name) and node.id == "env") or (
        isinstance(node, ast.Attribute) and node.attr == "environ")


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isupper():
        return node.value
    return None


def reads(tree: ast.AST) -> dict[str, object]:
    """{NAME: default} of every environment read in a module: `env.get("NAME"[, default])`,
    `os.environ.get(...)`, `os.getenv(...)`, any helper called as `helper(env, "NAME"[, default])`
    (`_int`, `_float`, and whatever comes next), `env["NAME"]` and `"NAME" in env`."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: dict[str, object] = {}
    for node in ast.walk(tree):
        name, default = None, COMPUTED
        if isinstance(node, ast.Call):
            func, args = node.func, node.args
            if isinstance(func, ast.Attribute) and func.attr == "get" and _is_env(func.value) and args:
                name = _name(args[0])
                default = _value(args[1]) if len(args) > 1 else _or_default(node, parents)
            elif isinstance(func, ast.Attribute) and func.attr == "getenv" and args:
                name = _name(args[0])
                default = _value(args[1]) if len(args) > 1 else _or_default(node, parents)
            elif len(args) >= 2 and _is_env(args[0]):
                name = _name(args[1])
                default = _value(args[2]) if len(args) > 2 else UNSET
        elif isinstance(node, ast.Subscript) and _is_env(node.value):
            name = _name(node.slice)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                and any(_is_env(c) for c in node.comparators):
            name = _name(node.left)
        if name and (name not in found or found[name] is COMPUTED):
            found[name] = default
    return found


def variables_read() -> dict[str, object]:
    """{NAME: default} of every environment variable the configuration code reads."""
    found: dict[str, object] = {}
    for path in ENV_SOURCES:
        for name, default in reads(ast.parse(path.read_text())).items():
            if name not in found or found[name] is COMPUTED:
                found[name] = default
    return found


def split_defaults(text: str) -> list[str]:
    """The defaults of one row, one per variable: split at commas outside `code` and (brackets)."""
    out, depth, ticks, current = [], 0, False, ""
    for ch in text:
        if ch == "`":
            ticks = not ticks
        elif not ticks and ch in "([":
            depth += 1
        elif not ticks and ch in ")]":
            depth -= 1
        if ch == "," and not ticks and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    return out + [current.strip()]


def config_rows() -> list[tuple[list[str], list[str]]]:
    """(variables, defaults) per row of the settings table."""
    out = []
    for variables, defaults, what in table(SETTINGS_DOC, ("variable", "default", "what")):
        names = ticked(variables)
        values = split_defaults(defaults) if len(names) > 1 else [defaults.strip()]
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


def test_the_parser_finds_every_form_of_read():
    source = '''
import os
def load(env):
    a = env.get("A_PLAIN")
    b = env.get("B_DEFAULT", "x")
    c = env.get("C_OR") or 3
    d = _bool(env, "D_HELPER", True)
    e = env["E_REQUIRED"]
    f = "F_FLAG" in env
    g = os.environ.get("G_OS", "y")
    h = os.getenv("H_GETENV")
    i = _int(env, "I_COMPUTED", 3 if c else 1)
    j = env.get("lower_is_not_a_setting")
'''
    read = reads(ast.parse(source))
    assert read == {"A_PLAIN": UNSET, "B_DEFAULT": "x", "C_OR": 3, "D_HELPER": True, "E_REQUIRED": COMPUTED,
                    "F_FLAG": COMPUTED, "G_OS": "y", "H_GETENV": UNSET, "I_COMPUTED": COMPUTED}


def test_defaults_split_at_top_level_commas_only():
    assert split_defaults("4, 1 (3 with `CLUSTER=1`), 1 (2, or more), 168") == [
        "4", "1 (3 with `CLUSTER=1`)", "1 (2, or more)", "168"]
    assert split_defaults("`a,b`, unset") == ["`a,b`", "unset"]


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
            elif isinstance(want, bool):
                assert shown.lower() in (("1", "true", "on", "yes") if want else ("0", "false", "off", "no")), (
                    name, shown, want)
            elif isinstance(want, (int, float)):
                assert float(shown) == float(want), (name, shown, want)
            else:
                assert shown == want, (name, shown, want)


# ------------------------------------------------------------------ links and anchors

def pages() -> list[Path]:
    return [README, RESULTS, *sorted(DOCS.rglob("*.md"))]


def without_code(text: str) -> str:
    """The text with fenced code blocks and `code spans` blanked (line numbers kept)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
            lines.append("")
            continue
        lines.append("" if fenced else re.sub(r"`[^`]*`", "", line))
    return "\n".join(lines)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links and images as their text, HTML tags gone),
    lowercase, every character but letters, digits, '_', '-' and ' ' removed, each space a '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a Markdown page: its headings' slugs (a repeated one numbered -1, -2, ...,
    as GitHub does) and any explicit `id="..."` or `name="..."`."""
    text = path.read_text()
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in text.splitlines():
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    out |= set(re.findall(r"""\b(?:id|name)=["']([^"']+)["']""", text))
    return out


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_LINK = re.compile(r"""\b(?:href|src)=["']([^"']+)["']""")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link and picture of a page: Markdown, reference-style and HTML."""
    out = []
    for number, line in enumerate(without_code(path.read_text()).splitlines(), start=1):
        for pattern in (LINK, HTML_LINK, REFERENCE):
            out += [(number, m.group(1)) for m in pattern.finditer(line)]
    return out


def broken(path: Path, root: Path = ROOT) -> list[str]:
    """Each link of `path` (a page of the repository at `root`) that leads nowhere, in one line."""
    out = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):   # http:, https:, mailto: - not ours to check
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        where = f"{path.relative_to(root)}:{number}: {target}"
        if not dest.exists():
            out.append(f"{where} (no such file)")
        elif not dest.resolve().is_relative_to(root):
            out.append(f"{where} (outside the repository)")
        elif anchor:
            if dest.suffix != ".md":
                out.append(f"{where} (an anchor into a file that is not Markdown)")
            elif anchor not in anchors(dest):
                out.append(f"{where} (no heading has the anchor #{anchor})")
    return out


def test_github_slugs():
    assert slug("Checkpoints & state") == "checkpoints--state"
    assert slug("The batch's waits removed") == "the-batchs-waits-removed"
    assert slug("Real-time path, every configuration measured") == "real-time-path-every-configuration-measured"
    assert slug("The local cluster: `make cluster-up`, `make demo CLUSTER=1`") == \
        "the-local-cluster-make-cluster-up-make-demo-cluster1"
    assert slug("STATE_TTL and [the docs](x.md)") == "state_ttl-and-the-docs"


def test_repeated_headings_are_numbered(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# A\n## Runs\n```\n## Not a heading\n```\n## Runs\n### Runs\n")
    assert anchors(page) == {"a", "runs", "runs-1", "runs-2"}


def test_the_link_check_finds_each_kind_of_broken_link(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Title\n\n## Part two\n")
    (tmp_path / "pic.png").write_bytes(b"")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/a.md#part-two) [ok](#top) ![ok](pic.png) <img src=\"pic.png\"> [web](https://x.y/#z)\n"
        "[bad file](docs/b.md) [bad anchor](docs/a.md#part-3) <a href=\"docs/a.md#nope\">x</a>\n"
        "`[in code](nowhere.md)` [self](#nothing)\n\n# Top\n")
    assert [b.split(" (")[0] for b in broken(page, root=tmp_path)] == [
        "README.md:2: docs/b.md", "README.md:2: docs/a.md#part-3", "README.md:2: docs/a.md#nope",
        "README.md:3: #nothing"]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_leads_somewhere(page):
    assert page.exists(), page
    assert not broken(page), "\n".join(broken(page))


def test_every_doc_page_is_linked_from_the_readme():
    linked = {(README.parent / target.partition("#")[0]).resolve() for _, target in links(README)}
    unlinked = [str(p.relative_to(ROOT)) for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


# ------------------------------------------------------------------ the README

def test_no_test_over_a_seeded_store_writes_a_picture_into_the_docs():
    """A seeded store's pictures are test evidence, never the product: they go to the test's own
    folder (a `make test` leaves docs/screenshots/ as committed but for the live runs' pictures)."""
    for source in (ROOT / "tests" / "browser").glob("test_*.py"):
        text = source.read_text()
        assert "SHOTS" not in text and '"screenshots"' not in text, \
            f"{source.name} uses the docs' screenshot folder (tests/harness/browser.py SHOTS)"


def test_the_readme_is_a_newcomer_s_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move the detail to docs/"
    figures = set(section(README, "Figures"))
    dated = [line for line in lines if re.search(r"\b20\d\d-\d\d-\d\d\b", line) and line not in figures]
    assert not dated, "the README is dated only in its figures table (the rest goes to bench/RESULTS.md):\n" + \
        "\n".join(dated)


def test_each_readme_figure_links_to_its_section_of_the_results():
    rows = table((README, "Figures"), ("figure", "measured", "goal", "when", "details"))
    assert rows
    for row in rows:
        targets = [t for _, t in links_in(row[-1])]
        assert targets and all(t.startswith("bench/RESULTS.md#") for t in targets), row


def links_in(text: str) -> list[tuple[int, str]]:
    return [(0, m.group(1)) for m in LINK.finditer(text)]

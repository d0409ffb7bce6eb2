"""cardstream.parse.JsonFields (pipelines/engine/jvm) against the Spark expressions it replaces:
a text is JSON exactly when try_parse_json says so, and for every JSON value a field can hold its
type is schema_of_variant's and its values are try_variant_get's, on the session's JVM. Each
comparison runs for both parses JSON_PARSE chooses: `scan` (JsonFields) and `spark`
(sources.variant_fields, Spark's own functions), so a record gets the same verdict from either."""
from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from pipelines.engine.sources import json_fields, json_fields_type

FIELDS = {"s": str, "b": bool, "i": int, "f": float}
# what a field can hold: every JSON scalar (numbers at the edges of long, double and decimal), a
# null, an object, an array
VALUES = ['"t-000123"', '""', '"  "', '"é€😀\\u00e9\\n\\"q\\""', '"12"', "true", "false", "null", "0", "-0",
          "12", "-12", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "12.0", "12.5",
          "-12.5", "1.2e3", "1.5e-3", "1e308", "1e400", "-1e400", "9.223372036854775807e18", "9.3e18",
          "12.50", "0.0000000000000000001", "1.00000000000000000001", "99999999999999999999.0",
          "123456789012345678901234567890", "1234567890123456789012345678901234567890", '{"a": 1}', "[1, 2]", "[]",
          "{}"]


def expected(spark, docs: list[str]):
    """try_parse_json, then the expressions sources.py used per field before JsonFields (None: not JSON)."""
    df = spark.createDataFrame([(d,) for d in docs], "text string").select(F.try_parse_json("text").alias("v"))
    cols = [F.schema_of_variant("v").startswith("OBJECT").alias("is_object")]
    for n, kind in FIELDS.items():
        v = F.variant_get("v", f"$.{n}", "variant")
        cols.append(F.schema_of_variant(v).alias(f"t_{n}"))
        if kind is str:
            cols.append(F.try_variant_get(v, "$", "string").alias(f"s_{n}"))
        elif kind is bool:
            cols.append(F.try_variant_get(v, "$", "boolean").alias(f"b_{n}"))
        else:
            cols.append(F.try_variant_get(v, "$", "double").alias(f"d_{n}"))
            if kind is int:
                cols.append(F.try_variant_get(v, "$", "bigint").alias(f"l_{n}"))
    return [r.asDict() if r["json"] else None for r in df.select(F.col("v").isNotNull().alias("json"), *cols).collect()]


PARSES = pytest.mark.parametrize("how", ["scan", "spark"])


def actual(spark, docs: list[str], how: str = "scan"):
    """The parse `how` on the records' bytes, as the contract calls it; on their text too, the same."""
    df = spark.createDataFrame([(d,) for d in docs], "text string")
    fields = json_fields(spark, FIELDS, how)
    rows = df.select(fields(F.col("text").cast("binary")).alias("f"), fields(F.col("text")).alias("g")).collect()
    assert all(r["f"] == r["g"] for r in rows)
    out = [r["f"].asDict() if r["f"] is not None else None for r in rows]
    for row in filter(None, out):  # the contract's flags: the type names' meaning, as booleans
        for n, kind in FIELDS.items():
            t = row[f"t_{n}"]
            of_kind = {str: t == "STRING", bool: t == "BOOLEAN"}.get(kind, is_number(t))
            assert (row[f"m_{n}"], row[f"ok_{n}"]) == (t in (None, "VOID"), of_kind), (n, row)
    return out


def is_number(t: str | None) -> bool:
    return t is not None and (t in ("BIGINT", "DOUBLE", "FLOAT") or t.startswith("DECIMAL("))


def comparable(row: dict, kind_of: dict) -> dict:
    """Values only where the SQL uses them: a string or boolean of that JSON type, the numbers of
    a number (sources.py reads nothing else from a field)."""
    out = {"is_object": row["is_object"]}
    for n, kind in FIELDS.items():
        t = row[f"t_{n}"]
        out[f"t_{n}"] = t
        number = is_number(t)
        if kind is str:
            out[f"s_{n}"] = row[f"s_{n}"] if t == "STRING" else None
        elif kind is bool:
            out[f"b_{n}"] = row[f"b_{n}"] if t == "BOOLEAN" else None
        else:
            out[f"d_{n}"] = row[f"d_{n}"] if number else None
            if kind is int:
                out[f"l_{n}"] = row[f"l_{n}"] if number else None
    return out


@PARSES
def test_every_json_value_gets_the_type_and_values_of_sparks_expressions(spark, how):
    docs = [json.dumps({n: "@"}).replace('"@"', value) for value in VALUES for n in FIELDS]
    docs += ["{}", '{"other": 1}', "[1]", '"s"', "12", "null"]  # absent fields; roots that are not objects
    # all four among other keys (a prefix of one, non-ASCII, empty, nested, 40 more), in any order;
    docs += ['{"zz": 1, "f": 1.5, "é": 2, "s": "x", "ss": "no", "": 0, "i": 7, "o": {"s": "in"}, "b": true}',
             json.dumps({**{f"k{j}": j for j in range(40)}, "b": False, "i": -3, "s": "y", "f": 2}),
             '{"o": {"s": "x", "i": 1}}']  # the names only inside a nested object: absent at the top
    want, got = expected(spark, docs), actual(spark, docs, how)
    assert len(got) == len(docs)
    for doc, w, g in zip(docs, want, got):
        assert g is not None, doc
        assert comparable(g, FIELDS) == comparable(w, FIELDS), doc
    # the comparison is not vacuous: each kind met a value of its own type and one of another
    types = {n: {comparable(w, FIELDS)[f"t_{n}"] for w in want} for n in FIELDS}
    assert {"STRING", "BOOLEAN", "BIGINT", "DOUBLE", "VOID", None} <= types["s"]
    assert any(t and t.startswith("DECIMAL(") for t in types["i"])


# what try_parse_json refuses (and two it takes): each is null there and here
NOT_JSON = ["{", "not json", "", " ", '{"a": 1, "a": 2}', '{"o": {"a": 1, "a": 2}}', '{"s": "\\ud800"}',
            '{"s": "\\udc00x"}', '{"n": NaN}', '{"n": Infinity}', "\ufeff{}", '{"s": "a\tb"}', "{'a': 1}",
            '{"a": 1,}', "[1,]", '{"a": 01}', '{"a": 1} trailing', "[" * 1200 + "]" * 1200, "[" * 900 + "]" * 900, None]


# the edges of the scan that reads plain flat objects without the builder (JsonFields.plain):
# each is decided as try_parse_json decides it, with the same types and values when it is JSON
PLAIN_EDGES = [' \t\r\n{ "s" : "x" , "i" :\n-7 }\n ', "{ }", '{"s":"x"} x', '{"s":"x",}', "{,}", '{"s" "x"}',
               '{"s":"x" "i":1}', '{"s":"a\\"b"}', '{"x":"a\\"b\\\\c\\/d\\n\\t\\b\\f\\r","s":"v"}',
               '{"x":"\\u0041","s":"v"}', '{"x":"\\q","s":"v"}', '{"s\\u0041":1,"s":"v"}', '{"x":{"s":1},"s":"v"}',
               '{"x":[1,{"a":2}],"i":3}', '{"s":"a","s":"b"}', '{"s":"v","x":1,"x":2}', '{"b":truex}', '{"b":tru}',
               '{"b":nul}', '{"i":-}', '{"i":1.}', '{"i":.5}', '{"i":1e}', '{"i":1e+}', '{"i":--1}', '{"i":+1}',
               '{"i":123456789012345678}', '{"i":-123456789012345678}', '{"i":1234567890123456789}', '{"i":1E5}',
               '{"i":0}', '{"i":00}', '{"i":-01}', '{"f":7}', '{"f":-0.25}', '{"x":1.5e-7,"y":-0E+0,"i":2}',
               '{"s":"\x7f\u00e9\u4e2d"}', '{"x":"😀","s":"v😀"}', '{"s":"tab\there"}', '{"s":"x"}\n\t',
               '{"s":"' + "k" * 2000 + '"}', '{"' + "k" * 1500 + '":1,"s":"v"}', '{"i":' + "1" * 120 + "}",
               '{"x":' + "1" * 1200 + ',"s":"v"}', '{"é":1,"s":"v"}', '{"":1,"s":"v"}', '{"s":null,"b":null,"i":null}',
               '{"s":true,"b":"true","i":"1","f":false}', "{\"s\":\"v\"", '{"s":"v"',
               '{"f":12.50,"i":12.5,"s":0.5,"b":-0.0}', '{"f":100.0,"i":-12.99}', '{"f":0.001,"i":0.000000000000000001}',
               '{"f":12345678901234567.5}', '{"f":1234567890123456789.5}', '{"f":48.85661,"i":2.35222}', '{"f":-0.00}',
               '{"f":1.5e3}', '{"i":0.0000000000000000001}', '{"f":00.5}', '{"f":-.5}']
# the scan reads names and strings eight bytes at a time: a byte that ends or breaks a run at every
# position of a lane, in a name and in a value asked for or not
PLAIN_EDGES += [doc for p in range(18) for x in ('"', '\\"', '\\n', "\t", "\x7f", "\u00e9", "\x1f", "\\u0041")
                for doc in ('{"' + "k" * p + x + 'k":1,"s":"v"}', '{"s":"' + "v" * p + x + 'v"}',
                            '{"x":"' + "v" * p + x + 'v","s":"' + "w" * p + '"}')]


@PARSES
def test_the_plain_object_scan_decides_as_try_parse_json_and_reads_the_same_values(spark, how):
    want, got = expected(spark, PLAIN_EDGES), actual(spark, PLAIN_EDGES, how)
    for doc, w, g in zip(PLAIN_EDGES, want, got):
        assert (w is None) == (g is None), doc
        if w is not None:
            assert comparable(g, FIELDS) == comparable(w, FIELDS), doc
    assert sum(w is None for w in want) >= 10 and sum(w is not None for w in want) >= 10


def test_the_records_producers_write_take_the_scan_and_anything_else_the_builder(spark):
    gateway, jvm = spark.sparkContext._gateway, spark._jvm

    def strings(values):
        array = gateway.new_array(jvm.java.lang.String, len(values))
        for i, v in enumerate(values):
            array[i] = v
        return array

    scan = jvm.cardstream.parse.JsonFields(strings(list(FIELDS)), strings(["str", "bool", "int", "float"]), False, True)
    decision = json.dumps({"txn_id": "tx-1", "card_id": "c", "amount_cents": 1200, "score": 0.1, "is_fraud": False,
                           "explanation": json.dumps([{"feature": "amount", "share": 0.5}]), "s": "é", "i": -3},
                          ensure_ascii=False)
    for doc in (decision, PLAIN_EDGES[0], "{ }", PLAIN_EDGES[8], '{"x":1.5e-7,"y":-0E+0,"i":2}', '{"f":-0.25}'):
        assert scan.plain(doc.encode()) is not None, doc
    for doc in ('{"s":"a\\"b"}', '{"x":{"s":1}}', '{"i":1234567890123456789}', '{"f":1.5e3}', '{"s":"a","s":"b"}',
                '{"s":"x"} x', '{"é":1}', "[1]"):
        assert scan.plain(doc.encode()) is None, doc
    for p in range(18):  # names and strings of every length around the scan's eight-byte steps
        assert scan.plain(('{"' + "k" * p + '":1,"s":"' + "v" * p + '\u00e9\\"","x":"' + "w" * p + '"}').encode()) is None
        got = scan.plain(('{"' + "k" * p + '":1,"s":"' + "v" * p + '\u00e9","x":"' + "w" * p + '\\t"}').encode())
        assert got is not None and str(got[4]) == "v" * p + "\u00e9", p
    # the layout a producer's records share (learned from the last plain record) decides nothing:
    # every record, on it, off it, a prefix of it or a repeat past it, reads as with no layout
    fresh = lambda: jvm.cardstream.parse.JsonFields(strings(list(FIELDS)), strings(["str", "bool", "int", "float"]),
                                                    False, True)
    for doc in ('{"s":"v","i":1,"x":2}', '{"s":"v","i":1,"x":2,"x":3}', '{"s":"v","i":1}', '{"s":"w","i":2,"x":3}',
                '{"s":"v","i":1,"x":2,"s":3}', '{"i":1,"s":"v"}', '{"i":1,"s":"v","i":2}', '{"s":"v","is":1}',
                '{"s":"v","i\\u0041":1}', '{"s":"v","i":1,"abcdefghijk":2}', '{"s":"v","i":1,"abcdefghijx":2}',
                '{"s":"v","i":1,"abcdefghijk":2,"s":1}', '{"s":"v","i":1,"abcdefghij":2}', '{"s":"v","i":1,"abcdefghijk"',
                # the bytes between values (a spacing learned from the last record) and the end
                '{"s": "v", "i": 1}', '{"s": "v", "i": 1} ', '{"s": "v", "i": 1}x', '{"s": "v", "i": 1',
                '{"s": "v", "i": ', '{"s": "v",  "i": 1}', ' {"s": "v", "i": 1}', '{"s": "v", "i": 1}\n',
                '{"s": "v", "i": 1}', '{"s": "v", "i": 1, "x": 2}', '{"s": "v", "i": 1, "x": 2, "x": 2}',
                '{"s": "v", "i": 12345678901234567}', '{"s": "v", "i": 1234567890123456789}', '{"s": "v", "i": -0}',
                '{"s": "v", "i": 12345678.5}', '{"s": "v", "i": 1234567a}', '{"s": "v", "i": 123456789:}',
                '{"s": "v", "i": 1234567/}', '{"s": "v", "i": 12345678@}', '{"s": "v", "i": 12345678 }',
                '{"s":"v","i":1}', '{"s":\t"v","i":\n1}', '{"s":"v","i":1}', '{"s": "v","i":  1}'):
        got, want = scan.plain(doc.encode()), fresh().plain(doc.encode())
        assert (got is None) == (want is None) and (got is None or [str(x) for x in got] == [str(x) for x in want]), doc
    for raw in (b'{"s":"\xff"}', b'{"x":"a\xe2\x82","s":"v"}', b'{"s":"\xed\xa0\x80"}'):  # not UTF-8: refused
        assert scan.plain(raw) is None and scan.internal(raw) is None, raw
    assert scan.internal('{"x":"\u20ac","s":"\u00e9"}'.encode()) is not None


@PARSES
def test_a_text_is_json_exactly_when_try_parse_json_says_so(spark, how):
    want, got = expected(spark, NOT_JSON), actual(spark, NOT_JSON, how)
    assert [w is None for w in want] == [g is None for g in got]
    assert sum(g is None for g in got) >= len(NOT_JSON) - 4  # mostly refusals: the test sees both answers
    assert any(g is not None for g in got)


def test_the_struct_type_follows_the_fields():
    names = [f.name for f in json_fields_type(FIELDS).fields]
    assert names == ["is_object", "t_s", "m_s", "ok_s", "s_s", "t_b", "m_b", "ok_b", "b_b", "t_i", "m_i", "ok_i", "d_i",
                     "l_i", "t_f", "m_f", "ok_f", "d_f"]


@pytest.mark.parametrize("kinds", [["str", "nope"], ["str"]])
def test_a_bad_field_spec_is_refused(spark, kinds):
    gateway, jvm = spark.sparkContext._gateway, spark._jvm
    names = gateway.new_array(jvm.java.lang.String, 2)
    names[0], names[1] = "a", "b"
    array = gateway.new_array(jvm.java.lang.String, len(kinds))
    for i, k in enumerate(kinds):
        array[i] = k
    with pytest.raises(Exception, match="unknown kind|one kind per field"):
        jvm.cardstream.parse.JsonFields(names, array, False, True)


def test_both_parses_refuse_bytes_that_are_not_utf8_and_agree_on_every_record(spark):
    """The bytes as Kafka hands them, invalid UTF-8 among them: null from either parse, and the
    same struct from both for everything else, record by record."""
    raws = [b'{"s":"\xff"}', b'{"x":"a\xe2\x82","s":"v"}', b'\xff{}', b'{"s":"\xed\xa0\x80"}']
    raws += [d.encode() for d in PLAIN_EDGES + NOT_JSON[:-1]]
    df = spark.createDataFrame([(r,) for r in raws], "raw binary")
    rows = df.select(json_fields(spark, FIELDS, "scan")(F.col("raw")).alias("scan"),
                     json_fields(spark, FIELDS, "spark")(F.col("raw")).alias("spark")).collect()
    assert all(r["scan"] is None and r["spark"] is None for r in rows[:4])
    for raw, r in zip(raws, rows):
        assert (r["scan"] is None) == (r["spark"] is None), raw
        if r["scan"] is not None:
            assert comparable(r["scan"].asDict(), FIELDS) == comparable(r["spark"].asDict(), FIELDS), raw

"""The fraud job's event-time features against a pandas computation of the same windows, on two
weeks of the fraud-detection handbook's dataset replayed in two micro-batches (the state carries
the first week into the second; the second week's labels arrive with it, after their delay): the
baseline windows against pandas rolling windows, the further history features (the card's past,
the terminal's known frauds) against pipelines/fraud/handbook.py history_features."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from infra.histories import HANDBOOK
from pipelines.fraud.features import CARD_HISTORY, HISTORY_FEATURES, LABEL_SCHEMA, STREAM_FEATURES, with_history
from pipelines.fraud.handbook import history_features
from pipelines.fraud.state import SCORED_DDL

pytestmark = pytest.mark.spark

DAY = pd.Timedelta(days=1)


def handbook_weeks(settings, start="2018-04-01", days=14) -> pd.DataFrame:
    import pyarrow.parquet as pq

    path = settings.handbook_data
    if not path.exists():
        raise AssertionError(f"the handbook dataset is not at {path} (HANDBOOK_DATA): this test needs it")
    t0 = pd.Timestamp(start)
    table = pq.read_table(path, filters=[("TX_DATETIME", ">=", t0), ("TX_DATETIME", "<", t0 + days * DAY)])
    return table.to_pandas()


def reference(tx: pd.DataFrame, delay_days: int) -> pd.DataFrame:
    """The handbook's baseline windows, computed with pandas rolling windows on a time index."""
    tx = tx.sort_values(["TX_DATETIME", "TRANSACTION_ID"]).reset_index(drop=True)
    out = pd.DataFrame({"TRANSACTION_ID": tx["TRANSACTION_ID"]})
    out["is_weekend"] = (tx["TX_DATETIME"].dt.weekday >= 5).astype(float)
    out["is_night"] = (tx["TX_DATETIME"].dt.hour <= 6).astype(float)
    def rolling(key, col, days, how):
        ordered = tx.sort_values([key, "TX_DATETIME", "TRANSACTION_ID"])
        r = ordered.groupby(key, sort=True).rolling(f"{days}d", on="TX_DATETIME")[col]
        return pd.Series(getattr(r, how)().values, index=ordered.index).sort_index().values  # tx's row order

    for w in (1, 7, 30):
        out[f"c_count_{w}d"] = rolling("CUSTOMER_ID", "TX_AMOUNT", w, "count")
        out[f"c_mean_{w}d"] = rolling("CUSTOMER_ID", "TX_AMOUNT", w, "mean")
        n = rolling("TERMINAL_ID", "TX_FRAUD", delay_days + w, "count") - rolling("TERMINAL_ID", "TX_FRAUD", delay_days, "count")
        k = rolling("TERMINAL_ID", "TX_FRAUD", delay_days + w, "sum") - rolling("TERMINAL_ID", "TX_FRAUD", delay_days, "sum")
        out[f"t_count_{w}d"] = n
        out[f"t_risk_{w}d"] = np.where(n > 0, k / np.where(n > 0, n, 1), 0.0)
    frame = pd.DataFrame({"txn_id": tx["TRANSACTION_ID"], "card_id": tx["CUSTOMER_ID"], "merchant_id": tx["TERMINAL_ID"],
                          "event_time": tx["TX_DATETIME"], "amount": tx["TX_AMOUNT"], "label": tx["TX_FRAUD"]})
    further = history_features(frame, delay_days)
    for name in HISTORY_FEATURES:
        out[name] = further[name].values
    return out.set_index("TRANSACTION_ID")


def test_card_and_terminal_windows_match_pandas_across_batches(spark, settings, tmp_path):

    delay = 7
    tx = handbook_weeks(settings)
    cut = pd.Timestamp("2018-04-08")
    ms = (tx["TX_DATETIME"].astype("int64") // 1_000_000).astype("int64")
    types = {"string": "string", "long": "Int64", "double": "Float64", "boolean": "boolean"}
    scored = pd.DataFrame({c.split()[0]: pd.Series(pd.NA, index=tx.index, dtype=types[c.split()[1]])
                           for c in (x.strip() for x in SCORED_DDL.split(","))})
    scored["txn_id"] = tx["TRANSACTION_ID"].map(HANDBOOK.txn_id_of)
    scored["card_id"] = tx["CUSTOMER_ID"].map(HANDBOOK.card_of)
    scored["merchant_id"] = tx["TERMINAL_ID"].map(HANDBOOK.merchant_of)
    scored["amount_cents"] = (tx["TX_AMOUNT"] * 100).round().astype("int64")
    scored["event_time"] = ms
    labels = pd.DataFrame({"txn_id": scored["txn_id"], "merchant_id": scored["merchant_id"],
                           "event_time": ms, "is_fraud": tx["TX_FRAUD"].astype(bool),
                           "known_at": ms + delay * 86_400_000})
    src, lab = tmp_path / "scored", tmp_path / "labels"
    schema = spark.createDataFrame([], SCORED_DDL).schema
    label_schema = spark.createDataFrame([], LABEL_SCHEMA).schema

    def write(frame, folder, sch, name):
        import pyarrow as pa
        import pyarrow.parquet as pq

        (folder / name).mkdir(parents=True)
        arrow = pa.Table.from_pandas(frame, preserve_index=False).select([f.name for f in sch.fields])
        pq.write_table(arrow.cast(pa.schema([(f.name, arrow.schema.field(f.name).type if f.name not in cast else cast[f.name])
                                             for f in sch.fields])), folder / name / "part-0.parquet")

    import pyarrow as pa
    cast = {"txn_id": pa.string()}
    got, histories = {}, {}

    def keep(rows):
        got.update({r["txn_id"]: r for r in rows})
        histories.update({r["card_id"]: r[CARD_HISTORY] for r in rows if r[CARD_HISTORY] is not None})

    def run():
        scored_stream = spark.readStream.schema(schema).parquet(str(src / "*"))
        label_stream = spark.readStream.schema(label_schema).parquet(str(lab / "*"))
        out = with_history(scored_stream, label_stream, SCORED_DDL, 24 * 3_600_000, delay, card_history=True)
        q = (out.writeStream.option("checkpointLocation", str(tmp_path / "checkpoint"))
             .foreachBatch(lambda df, _: keep(df.collect()))
             .trigger(availableNow=True).start())
        assert q.awaitTermination(240) and q.exception() is None

    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    first = tx["TX_DATETIME"] < cut
    week1_end = int(cut.value // 1_000_000)
    write(scored[first], src, schema, "w1")
    write(labels[labels["known_at"] < week1_end].drop(columns="known_at"), lab, label_schema, "w1")
    run()
    write(scored[~first], src, schema, "w2")
    write(labels[labels["known_at"] >= week1_end].drop(columns="known_at"), lab, label_schema, "w2")
    run()

    want = reference(tx, delay)
    assert len(got) == len(tx)
    frame = pd.DataFrame([{k: r[k] for k in ("txn_id", *STREAM_FEATURES)} for r in got.values()])
    frame["TRANSACTION_ID"] = frame["txn_id"].str.removeprefix(HANDBOOK.id_prefix).astype("int64")
    frame = frame.set_index("TRANSACTION_ID").loc[want.index]
    for name in STREAM_FEATURES:
        np.testing.assert_allclose(frame[name].astype(float).values, want[name].values, atol=1e-9, err_msg=name)
    # the windows are not trivially zero: week two's terminals see week one's frauds after the delay
    assert (frame.loc[tx.loc[~first, "TRANSACTION_ID"].values, "t_risk_7d"] > 0).sum() > 100
    assert frame["c_count_30d"].max() > frame["c_count_1d"].max()
    # ... nor are the further ones: payments far over their card's past, terminals with known frauds
    assert (frame["c_over_mean_14d"] > 0).sum() > 100 and (frame["c_amount_z_60d"] > 3).sum() > 100
    assert (frame["t_frauds_28d"] > 1).sum() > 10 and frame["t_days_since_fraud"].between(0, 14, inclusive="neither").sum() > 100
    # runs of more than one known fraud: their first older than their last
    assert (frame["t_days_since_first_fraud"] > frame["t_days_since_fraud"]).sum() > 10
    # each card's last row of a batch carries its state after it (issue 35 item 2: the real-time
    # seed's card history): after the second batch, its last 60 days with each payment's
    # over-the-mean flag (amount over 2.5x its 30-day past mean), from their definitions
    want_history, day = {}, 86_400_000
    for card, rows in scored.sort_values(["event_time", "txn_id"]).groupby("card_id", sort=False):
        kept = []
        for t, a in zip(rows["event_time"].astype("int64"), rows["amount_cents"].astype("int64")):
            past = [v for u, v, _ in kept if t - 30 * day < u <= t]
            kept.append((int(t), int(a), int(bool(past) and 2 * a * len(past) > 5 * sum(past))))
        kept = [x for x in kept if x[0] > kept[-1][0] - 60 * day]
        want_history[card] = ";".join(",".join(str(x[k]) for x in kept) for k in range(3))
    assert histories == want_history

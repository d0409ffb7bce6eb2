"""What the dashboard reads, one module per page: plain functions, no Streamlit, no prose.

Each page module takes a store connection (`store.open_store`) and, where time matters, `now` in
ms, and returns pandas DataFrames or dicts, so it can be tested on a seeded SQLite file. Every
read is bounded by time or by LIMIT: the pages refresh every few seconds against tables the jobs
keep growing. Every Kafka call goes through `kafka` (built on `infra.kafka_client`). The only
write is a command, issued by the views through `controlplane.commands.issue`.

- `store`: the short store connection and the frame helpers the others share;
- `kafka`: the broker probe (what the broker did, in words), end offsets, the newest records of a
  topic (the real-time decisions, the labels), and `BrokerDown`;
- `overview`, `guarantees`, `faults`, `windows`, `checkpoints`, `fraud`, `model`, `controls`: one per
  page; `quality`: the benches' recorded figures (Overview and Fraud).

Sentences shown to a reader are built in the views (`dashboard.views.text`), never here.
"""

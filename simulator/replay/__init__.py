"""`python -m simulator replay FILE`: a labelled transaction history, sent again in event time.

    python -m simulator replay FILE [--columns handbook | --column-map FIELD=COLUMN,...]
                                    [--speed S | --rate R | --max] [--from DATE] [--to DATE]
                                    [--label-delay-days D] [--run-id ID] ...

FILE is Parquet or CSV. Its columns are mapped onto the transaction contract by a ColumnMap
(infra/histories.py): the handbook's (`--columns handbook`, the default when the file has its
columns) or one written out (`--column-map txn_id=ID,event_time=TS,card_id=...`). Rows are sent in
the file's order, which must be event-time order, onto `transactions` (key: the card, header
REPLAY_HEADER: the run id, so the jobs judge its old times by the replay rule of
infra/contracts.py), each transaction's label onto `labels` (key: the txn id) only once its
feedback delay has passed in event time: the two streams are merged by time, a label's time being
its transaction's event time + the delay. A label is appended only after every transaction at or
before its time, at the first slice boundary after it (at most SLICE transactions late, never
early); labels whose time falls after the last replayed transaction are not sent (`labels_pending`
in the totals).

Pacing: `--speed S` runs event time S times as fast as the wall clock (labels paced the same
way), `--rate R` sends R transactions a second, `--max` (the default) as fast as the producer
takes them (the benchmark's). `--from`/`--to` keep whole days, UTC, both included.

Before the first record is sent, the selected rows are validated entirely (infra/history/): a
file that cannot be read, a missing column, times out of order, a duplicate txn id, an empty
selection, a negative amount and the like are one sentence on stderr and exit 2, with nothing
sent. (An amount of 0 is a payment of the history, a card check: the handbook has 42; the replay
contract accepts it.)

Progress: a bar on stderr (event date, tx/s, ETA); the totals, counted from the broker's
acknowledgements, are one JSON line, the last on stdout. Memory: the selected rows' columns
(about 60 bytes a row, and 16 more for the amount and pattern as read, which the handbook's frame
uses: 130 MB for the handbook's 1.75 M), and the records of a slice at a time.

    schedule.py    when each label may be sent: the merge of the two streams by event time
    records.py     a slice of the history as the records' keys and JSON values
    replayer.py    the loop: pacing, slices to the producer, signals, the totals
    cli.py         the command: options, the history loaded, the producer, the report

Nothing is imported here: `python -m simulator` imports `simulator.replay.cli` only for `replay`.
"""

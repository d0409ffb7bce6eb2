"""A slice of a history as Kafka records: keys and JSON values built column-wise by Arrow (a
Python dict and json.dumps per record would cost more than the producer). Ids and patterns are
JSON-escaped here, where they are written."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from infra.history import History
from infra.history.mapping import json_escaped
from simulator.replay.schedule import Schedule


def _join(*parts):
    return pc.binary_join_element_wise(*[pa.scalar(p) if isinstance(p, str) else p for p in parts], "")


def _binary_list(arr) -> list[bytes]:
    return arr.cast(pa.binary()).to_pylist()


def _text(values: np.ndarray):
    return pc.cast(pa.array(values), pa.string())


def transactions(h: History, i: int, j: int) -> tuple[list[bytes], list[bytes]]:
    """(keys, values without produced_at's value and the closing brace) of transactions [i, j)."""
    card = json_escaped(h.card.slice(i, j - i))
    fields = ['{"txn_id":"', json_escaped(h.txn.slice(i, j - i)), '","card_id":"', card, '","merchant_id":"',
              json_escaped(h.merchant.slice(i, j - i)), '","amount_cents":', _text(h.amount_cents[i:j]),
              f',"currency":"{h.currency}"']
    if h.lat is not None:
        lat, lon = pa.array(h.lat[i:j], from_pandas=True), pa.array(h.lon[i:j], from_pandas=True)
        place = _join(',"lat":', pc.cast(lat, pa.string()), ',"lon":', pc.cast(lon, pa.string()))
        fields.append(pc.fill_null(place, ""))
    fields += [',"event_time":', _text(h.event_ms[i:j]), ',"produced_at":']
    return _binary_list(card), _binary_list(_join(*fields))


def labels(h: History, s: Schedule, i: int, j: int) -> tuple[list[bytes], list[bytes]]:
    """(keys, values) of the labels of transactions [i, j)."""
    txn = json_escaped(h.txn.slice(i, j - i))
    fraud = pa.array(np.where(h.is_fraud[i:j], "true", "false"), pa.string())
    value = _join('{"txn_id":"', txn, '","is_fraud":', fraud, ',"pattern":"', json_escaped(h.pattern.slice(i, j - i)),
                  '","is_late":false,"card_id":"', json_escaped(h.card.slice(i, j - i)), '","merchant_id":"',
                  json_escaped(h.merchant.slice(i, j - i)), '","event_time":', _text(h.event_ms[i:j]),
                  ',"known_at":', _text(s.known_ms[i:j]), "}")
    return _binary_list(txn), _binary_list(value)

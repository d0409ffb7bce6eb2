"""Transaction histories a user replays (`python -m simulator replay FILE`), as plain data.

A history is a file of past transactions with their labels. Its columns are mapped onto the
transaction contract (infra/contracts.py) by a named column map; the fraud-detection handbook's
dataset (../shared/datasets/handbook/, Le Borgne et al., ULB MLG and Worldline) is built in as
`HANDBOOK`. One definition: the replay, the fraud job's features and `bench handbook` all read it,
so a handbook id means the same thing in each.
"""
from __future__ import annotations

from dataclasses import dataclass

# A replayed record carries this Kafka header (value: the replay's run id). The live contract
# judges a record's times against the broker's append time; a replayed history's times are
# years old by design, so for a record with this header the time rule is "plausible
# milliseconds" (on or after HISTORY_MIN_EVENT_TIME_MS, not in the future) instead.
REPLAY_HEADER = "cardstream-replay"
HISTORY_MIN_EVENT_TIME_MS = 946_684_800_000  # 2000-01-01: earlier is a unit error, not history

# The feedback delay: a transaction's label reaches the job this long after the transaction
# (in event time), the way a fraud team's investigations reach it.
DEFAULT_LABEL_DELAY_DAYS = 7
DAY_MS = 86_400_000


@dataclass(frozen=True)
class ColumnMap:
    """Which column of a history file holds which field of the contract."""
    name: str
    txn_id: str
    event_time: str
    card_id: str
    merchant_id: str
    amount: str            # in currency units (cents = round(amount * 100))
    is_fraud: str
    pattern: str | None = None   # a label's pattern (the handbook's fraud scenario)
    lat: str | None = None       # no coordinates: the proximity analyzer has no opinion
    lon: str | None = None
    currency: str = "EUR"        # a fixed currency when the file has none
    id_prefix: str = ""          # ids become f"{prefix}{kind}{value}": unique across histories
    # the pattern column's values -> a label's `pattern` ((value, name) pairs); a value not named
    # here is used as it is, and with no pattern column a label says "fraud" or "normal"
    pattern_names: tuple = ()

    def required(self) -> list[str]:
        cols = [self.txn_id, self.event_time, self.card_id, self.merchant_id, self.amount, self.is_fraud]
        return cols + [c for c in (self.pattern, self.lat, self.lon) if c]

    def txn_id_of(self, value) -> str:
        return f"{self.id_prefix}{value}"

    def card_of(self, value) -> str:
        return f"{self.id_prefix}c{value}"

    def merchant_of(self, value) -> str:
        return f"{self.id_prefix}t{value}"


# The handbook's simulated transactions: TRANSACTION_ID, TX_DATETIME (no zone: read as UTC),
# CUSTOMER_ID (the card), TERMINAL_ID (the merchant's terminal), TX_AMOUNT, TX_FRAUD,
# TX_FRAUD_SCENARIO (0 genuine, 1 amount over 220, 2 compromised terminal, 3 compromised card).
# The handbook's scenarios, as a label's `pattern`
HANDBOOK_PATTERNS = {0: "normal", 1: "amount-over-220", 2: "compromised-terminal", 3: "compromised-card"}
HANDBOOK = ColumnMap(name="handbook", txn_id="TRANSACTION_ID", event_time="TX_DATETIME",
                     card_id="CUSTOMER_ID", merchant_id="TERMINAL_ID", amount="TX_AMOUNT",
                     is_fraud="TX_FRAUD", pattern="TX_FRAUD_SCENARIO", id_prefix="hb-",
                     pattern_names=tuple(HANDBOOK_PATTERNS.items()))
COLUMN_MAPS = {HANDBOOK.name: HANDBOOK}

# ------------------------------------------------------------------ a column map written out

MAP_COLUMNS = ("txn_id", "event_time", "card_id", "merchant_id", "amount", "is_fraud", "pattern", "lat", "lon")
MAP_REQUIRED = MAP_COLUMNS[:6]
MAP_VALUES = ("currency", "id_prefix")  # not columns: a fixed currency, the ids' prefix


class ColumnMapError(ValueError):
    """A column map that cannot be read, in one sentence."""


def parse_column_map(text: str, name: str = "custom") -> ColumnMap:
    """`txn_id=ID,event_time=TS,card_id=CARD,merchant_id=SHOP,amount=AMT,is_fraud=FRAUD[,pattern=P]
    [,lat=LAT,lon=LON][,currency=EUR][,id_prefix=x-]` -> a ColumnMap (ColumnMapError: why not).

    The left side names a field (MAP_COLUMNS: a column of the file; MAP_VALUES: a fixed value),
    the right side the file's column (or the value); a column name cannot hold ',' or '='."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not part.strip():
            raise ColumnMapError(f"The column map {text!r} has an empty entry (two commas, or one at an end).")
        if not eq or not key:
            raise ColumnMapError(f"The column map entry {part.strip()!r} is not FIELD=COLUMN.")
        if key not in MAP_COLUMNS + MAP_VALUES:
            raise ColumnMapError(f"The column map names an unknown field {key!r}; the fields are "
                                 f"{', '.join(MAP_COLUMNS + MAP_VALUES)}.")
        if key in fields:
            raise ColumnMapError(f"The column map gives the field {key!r} twice.")
        if not value and key != "id_prefix":
            raise ColumnMapError(f"The column map gives the field {key!r} no column.")
        fields[key] = value
    missing = [k for k in MAP_REQUIRED if k not in fields]
    if missing:
        raise ColumnMapError(f"The column map has no column for {', '.join(missing)} "
                             f"(it needs {', '.join(MAP_REQUIRED)}).")
    if ("lat" in fields) != ("lon" in fields):
        raise ColumnMapError(f"The column map gives {'lat' if 'lat' in fields else 'lon'} without "
                             f"{'lon' if 'lat' in fields else 'lat'}: coordinates come in pairs.")
    return ColumnMap(name=name, **fields)

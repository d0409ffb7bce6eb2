package cardstream.fraud;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.KeyValueGroupedDataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * The fraud job's event-time features (pipelines/fraud/features.py names them): per card and per
 * terminal, over 1, 7 and 30 days of event time, kept in Spark state keyed by card and by
 * terminal. Event time is the only clock: a history replayed at thousands of transactions a second
 * gives the features the same days would give live. Each key's state holds the event times (and
 * amounts, or known frauds) of its last window; entries older than the longest window before the
 * key's newest event are dropped, and Spark's TTL removes a key that has gone quiet.
 *
 * <p>The terminal's risk uses labels only once the feedback delay has passed: a label of a payment
 * at time s counts for the windows (t - delay - w, t - delay], so for payments at t >= s + delay.
 * Labels reach the operator on the same stream as the transactions (a union keyed by terminal);
 * in a batch, labels are applied before transactions.
 */
public final class History {
    private History() {}

    static final long DAY_MS = 86_400_000L;
    static final int[] WINDOW_DAYS = {1, 7, 30};
    static final int LONGEST = 30;
    // beyond the baseline (features.py HISTORY_FEATURES)
    static final int[] PAST_DAYS = {30, 60};
    static final int[] OVER_MEAN_DAYS = {1, 7, 14};
    static final int[] RISK_DAYS = {14, 21, 28};
    static final int FRAUDS_DAYS = 28;
    static final double NO_FRAUD_DAYS = 90.0;
    static final int CARD_LONGEST = 60;

    /** Card windows: (count, mean amount in currency units) over (t - w days, t], current included. */
    static double[] cardFeatures(long[] times, long[] amounts, int n, long t) {
        double[] out = new double[2 * WINDOW_DAYS.length];
        for (int k = 0; k < WINDOW_DAYS.length; k++) {
            long from = t - WINDOW_DAYS[k] * DAY_MS;
            long count = 0, sum = 0;
            for (int i = 0; i < n; i++) {
                if (times[i] > from && times[i] <= t) {
                    count++;
                    sum += amounts[i];
                }
            }
            out[2 * k] = count;
            out[2 * k + 1] = count == 0 ? 0.0 : sum / 100.0 / count;
        }
        return out;
    }

    /**
     * The payment (amount `a` cents at t) against the card's earlier payments (the first n entries,
     * the payment not among them) in (t - w, t], w in PAST_DAYS: per window its amount over their
     * mean (1 when none) then its population z-score (0 without spread), as
     * a x count / sum and (a x count - sum) / sqrt(count x sumsq - sum^2), in exact integers
     * held in doubles (handbook.py history_features does the same steps). The last element is 1
     * when the payment is over 2.5x its 30-day past mean (2 a count > 5 sum).
     */
    static double[] pastFeatures(long[] times, long[] amounts, int n, long t, long a) {
        double[] out = new double[2 * PAST_DAYS.length + 1];
        double over = 0.0;
        for (int k = 0; k < PAST_DAYS.length; k++) {
            long from = t - PAST_DAYS[k] * DAY_MS;
            double count = 0, sum = 0, sumsq = 0;
            for (int i = 0; i < n; i++) {
                if (times[i] > from && times[i] <= t) {
                    double v = amounts[i];
                    count++;
                    sum += v;
                    sumsq += v * v;
                }
            }
            double an = (double) a * count;
            out[k] = count > 0 && sum > 0 ? an / sum : 1.0;
            double root = Math.sqrt(Math.max(count * sumsq - sum * sum, 0.0));
            out[PAST_DAYS.length + k] = root > 0 ? (an - sum) / root : 0.0;
            if (PAST_DAYS[k] == 30) over = count > 0 && 2.0 * a * count > 5.0 * sum ? 1.0 : 0.0;
        }
        out[out.length - 1] = over;
        return out;
    }

    /** The card's payments flagged over their past mean in (t - w, t], w in OVER_MEAN_DAYS. */
    static double[] overMeanCounts(long[] times, long[] over, int n, long t) {
        double[] out = new double[OVER_MEAN_DAYS.length];
        for (int k = 0; k < OVER_MEAN_DAYS.length; k++) {
            long from = t - OVER_MEAN_DAYS[k] * DAY_MS;
            long count = 0;
            for (int i = 0; i < n; i++) {
                if (times[i] > from && times[i] <= t) count += over[i];
            }
            out[k] = count;
        }
        return out;
    }

    /**
     * The terminal's known frauds up to t - delay: the share of frauds over (t - delay - w days,
     * t - delay] for w in RISK_DAYS, the frauds over FRAUDS_DAYS, the days since the last of them
     * (`lastPruned`: the newest fraud dropped from the kept ones, or Long.MIN_VALUE), capped at
     * NO_FRAUD_DAYS, which also stands for none, and the days since the first fraud over
     * FRAUDS_DAYS (NO_FRAUD_DAYS when none): how long the terminal's run of frauds has lasted.
     */
    static double[] fraudFeatures(long[] times, int n, long[] frauds, int nf, long lastPruned, long t, long delayMs) {
        double[] out = new double[RISK_DAYS.length + 3];
        long end = t - delayMs;
        for (int k = 0; k < RISK_DAYS.length; k++) {
            long from = end - RISK_DAYS[k] * DAY_MS;
            long count = 0, fraud = 0;
            for (int i = 0; i < n; i++) {
                if (times[i] > from && times[i] <= end) count++;
            }
            for (int i = 0; i < nf; i++) {
                if (frauds[i] > from && frauds[i] <= end) fraud++;
            }
            out[k] = count == 0 ? 0.0 : Math.min(1.0, (double) fraud / count);
        }
        long from = end - FRAUDS_DAYS * DAY_MS;
        long known = 0, last = lastPruned <= end ? lastPruned : Long.MIN_VALUE, first = Long.MAX_VALUE;
        for (int i = 0; i < nf; i++) {
            if (frauds[i] <= end) {
                if (frauds[i] > from) {
                    known++;
                    first = Math.min(first, frauds[i]);
                }
                last = Math.max(last, frauds[i]);
            }
        }
        out[RISK_DAYS.length] = known;
        out[RISK_DAYS.length + 1] = last == Long.MIN_VALUE ? NO_FRAUD_DAYS
            : Math.min((double) (t - last) / DAY_MS, NO_FRAUD_DAYS);
        out[RISK_DAYS.length + 2] = first == Long.MAX_VALUE ? NO_FRAUD_DAYS : (double) (t - first) / DAY_MS;
        return out;
    }

    static double[] concat(double[] a, double[] b) {
        double[] out = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    /** Terminal windows: (count, share of known frauds) over (t - delay - w days, t - delay]. */
    static double[] terminalFeatures(long[] times, int n, long[] frauds, int nf, long t, long delayMs) {
        double[] out = new double[2 * WINDOW_DAYS.length];
        long end = t - delayMs;
        for (int k = 0; k < WINDOW_DAYS.length; k++) {
            long from = end - WINDOW_DAYS[k] * DAY_MS;
            long count = 0, fraud = 0;
            for (int i = 0; i < n; i++) {
                if (times[i] > from && times[i] <= end) count++;
            }
            for (int i = 0; i < nf; i++) {
                if (frauds[i] > from && frauds[i] <= end) fraud++;
            }
            out[2 * k] = count;
            out[2 * k + 1] = count == 0 ? 0.0 : Math.min(1.0, (double) fraud / count);
        }
        return out;
    }

    /** The entries of `times` (with their `values`) after `from`, in time order. */
    static int keepAfter(long[] times, long[] values, int n, long from) {
        int kept = 0;
        for (int i = 0; i < n; i++) {
            if (times[i] > from) {
                times[kept] = times[i];
                if (values != null) values[kept] = values[i];
                kept++;
            }
        }
        return kept;
    }

    static Row withValue(Row r, Object value) {
        Object[] values = new Object[r.length() + 1];
        for (int i = 0; i < r.length(); i++) values[i] = r.get(i);
        values[r.length()] = value;
        return RowFactory.create(values);
    }

    static Row withFeatures(Row r, int drop, double[] features) {
        int keep = r.length() - (drop >= 0 ? 1 : 0);
        Object[] values = new Object[keep + features.length];
        for (int i = 0, j = 0; i < r.length(); i++) {
            if (i != drop) values[j++] = r.get(i);
        }
        for (int k = 0; k < features.length; k++) values[keep + k] = features[k];
        return RowFactory.create(values);
    }

    // ------------------------------------------------------------------ per card

    static final StructType CARD_STATE = new StructType()
        .add("times", DataTypes.createArrayType(DataTypes.LongType, false))
        .add("amounts", DataTypes.createArrayType(DataTypes.LongType, false))
        .add("over", DataTypes.createArrayType(DataTypes.LongType, false));

    /**
     * Scored rows (card_id, event_time, amount_cents, txn_id, ...) -> the same + CARD_FEATURES +
     * CARD_PAST_FEATURES (features.py); the state keeps CARD_LONGEST days of each card.
     */
    public static Dataset<Row> cardWindows(Dataset<Row> scored, String outDdl, long ttlMs) {
        return cardWindows(scored, outDdl, ttlMs, false);
    }

    /**
     * The same; when `outDdl` ends with the string column HISTORY_COLUMN, it is null but on each
     * card's last row of a batch, where `keepHistory` puts the card's state after the batch
     * (historyText): a real-time start seeds its card windows with it (pipelines/fraud/seed.py).
     */
    public static Dataset<Row> cardWindows(Dataset<Row> scored, String outDdl, long ttlMs, boolean keepHistory) {
        StructType out = StructType.fromDDL(outDdl);
        StructType in = scored.schema();
        boolean column = out.fieldNames()[out.length() - 1].equals(HISTORY_COLUMN);
        return byColumn(scored, scored.col("card_id"))
            .transformWithState(new CardProcessor(in, ttlMs, column, keepHistory), TimeMode.ProcessingTime(),
                                OutputMode.Append(), Encoders.row(out));
    }

    static final String HISTORY_COLUMN = "c_history";

    /**
     * `rows` grouped by the string `key` (a column or an expression of them) for transformWithState,
     * each row handed over as it is. Why not groupByKey(function): that turns every row into a Row
     * object to call the function, a stage whose deserializer's code every task generates again
     * (Spark caches the compiled class, keyed by its source, but builds the source each time): 11 %
     * of the fraud job's JVM samples at the demo's 200 tx/s; without it the job's CPU a row fell
     * about 5 % (bench/RESULTS.md#recovery-beside-a-core-kept-busy-2026-11-27-the-slower-machine).
     * The state keeps the same key (a string, Encoders.STRING()'s) and the shuffle hashes the same
     * value, so a checkpoint written before resumes with the same decisions.
     */
    static KeyValueGroupedDataset<String, Row> byColumn(Dataset<Row> rows, Column key) {
        // named as groupByKey names its key (Encoders.STRING()'s field): the state's key schema stays the same
        return rows.groupBy(key.as("value")).as(Encoders.STRING(), Encoders.row(rows.schema()));
    }

    /** A card's history as "times;amounts;over" (comma-separated longs each; LiveProfiles.history reads it). */
    static String historyText(long[] times, long[] amounts, long[] over, int from, int to) {
        StringBuilder b = new StringBuilder((to - from) * 22 + 2);
        for (long[] values : new long[][] {times, amounts, over}) {
            if (values != times) b.append(';');
            for (int i = from; i < to; i++) {
                if (i > from) b.append(',');
                b.append(values[i]);
            }
        }
        return b.toString();
    }

    static final class CardProcessor extends StatefulProcessor<String, Row, Row> {
        private final long ttlMs;
        private final int eventTime, amount, txnId;
        private final boolean column, keepHistory;
        private transient ValueState<Row> state;

        CardProcessor(StructType in, long ttlMs, boolean column, boolean keepHistory) {
            this.ttlMs = ttlMs;
            this.column = column;
            this.keepHistory = keepHistory;
            eventTime = in.fieldIndex("event_time");
            amount = in.fieldIndex("amount_cents");
            txnId = in.fieldIndex("txn_id");
        }

        @Override
        public void init(OutputMode outputMode, TimeMode timeMode) {
            state = getHandle().getValueState("card_history", Encoders.row(CARD_STATE), TTLConfig.apply(Duration.ofMillis(ttlMs)));
        }

        @Override
        public scala.collection.Iterator<Row> handleInputRows(String key, scala.collection.Iterator<Row> rows,
                                                              TimerValues timerValues) {
            List<Row> batch = new ArrayList<>();
            while (rows.hasNext()) batch.add(rows.next());
            batch.sort(Comparator.comparingLong((Row r) -> r.getLong(eventTime)).thenComparing(r -> r.getString(txnId)));
            long[] times = new long[0], amounts = new long[0], over = new long[0];
            if (state.exists()) {
                Row s = state.get();
                times = toLongs(s.getList(0));
                amounts = toLongs(s.getList(1));
                over = toLongs(s.getList(2));
            }
            int n = times.length;
            times = Arrays.copyOf(times, n + batch.size());
            amounts = Arrays.copyOf(amounts, n + batch.size());
            over = Arrays.copyOf(over, n + batch.size());
            List<Row> out = new ArrayList<>(batch.size());
            for (Row r : batch) {
                long t = r.getLong(eventTime), a = r.getLong(amount);
                double[] past = pastFeatures(times, amounts, n, t, a);
                int at = insertAt(times, n, t);
                shift(amounts, n, at, a);
                shift(over, n, at, (long) past[past.length - 1]);
                n++;
                double[] features = concat(concat(cardFeatures(times, amounts, n, t), Arrays.copyOf(past, past.length - 1)),
                                           overMeanCounts(times, over, n, t));
                out.add(withFeatures(r, -1, features));
            }
            long newest = n > 0 ? times[n - 1] : 0;
            long from = newest - CARD_LONGEST * DAY_MS;
            int first = 0;
            while (first < n && times[first] <= from) first++;
            state.update(RowFactory.create(Arrays.copyOfRange(times, first, n), Arrays.copyOfRange(amounts, first, n),
                                           Arrays.copyOfRange(over, first, n)));
            if (column) {
                for (int i = 0; i < out.size(); i++) {
                    String history = keepHistory && i == out.size() - 1 ? historyText(times, amounts, over, first, n) : null;
                    out.set(i, withValue(out.get(i), history));
                }
            }
            return scala.jdk.javaapi.CollectionConverters.asScala(out.iterator());
        }
    }

    /** Insert t into the first n of the time-ordered `times` (capacity left), after equal times; its index. */
    static int insertAt(long[] times, int n, long t) {
        int i = n;
        while (i > 0 && times[i - 1] > t) {
            times[i] = times[i - 1];
            i--;
        }
        times[i] = t;
        return i;
    }

    /** Make room at index `at` of the first n of `values` and put v there. */
    static void shift(long[] values, int n, int at, long v) {
        System.arraycopy(values, at, values, at + 1, n - at);
        values[at] = v;
    }

    /** Insert (t, v) into the time-ordered arrays (capacity left for it), after equal times. */
    static int insert(long[] times, long[] values, int n, long t, long v) {
        int i = n;
        while (i > 0 && times[i - 1] > t) {
            times[i] = times[i - 1];
            if (values != null) values[i] = values[i - 1];
            i--;
        }
        times[i] = t;
        if (values != null) values[i] = v;
        return n + 1;
    }

    static long[] toLongs(List<Object> list) {
        long[] out = new long[list.size()];
        for (int i = 0; i < out.length; i++) out[i] = ((Number) list.get(i)).longValue();
        return out;
    }

    // ------------------------------------------------------------------ per terminal

    static final StructType TERMINAL_STATE = new StructType()
        .add("times", DataTypes.createArrayType(DataTypes.LongType, false))
        .add("frauds", DataTypes.createArrayType(DataTypes.LongType, false))
        .add("fraud_ids", DataTypes.createArrayType(DataTypes.StringType, false))
        .add("last_pruned", DataTypes.LongType, false);

    /**
     * Transactions and labels keyed by terminal (merchant_id) -> each transaction + TERMINAL_FEATURES
     * + TERMINAL_FRAUD_FEATURES (features.py).
     *
     * @param rows transactions (column `label_fraud` null) and labels (`label_fraud` set; only
     *     txn_id, merchant_id and event_time, the labelled payment's time, are read)
     */
    public static Dataset<Row> terminalWindows(Dataset<Row> rows, String outDdl, long ttlMs, long delayMs) {
        StructType out = StructType.fromDDL(outDdl);
        StructType in = rows.schema();
        return byColumn(rows, functions.coalesce(rows.col("merchant_id"), functions.lit("")))
            .transformWithState(new TerminalProcessor(in, ttlMs, delayMs), TimeMode.ProcessingTime(), OutputMode.Append(),
                                Encoders.row(out));
    }

    static final class TerminalProcessor extends StatefulProcessor<String, Row, Row> {
        private final long ttlMs, delayMs;
        private final int eventTime, txnId, label;
        private transient ValueState<Row> state;

        TerminalProcessor(StructType in, long ttlMs, long delayMs) {
            this.ttlMs = ttlMs;
            this.delayMs = delayMs;
            eventTime = in.fieldIndex("event_time");
            txnId = in.fieldIndex("txn_id");
            label = in.fieldIndex("label_fraud");
        }

        @Override
        public void init(OutputMode outputMode, TimeMode timeMode) {
            state = getHandle().getValueState("terminal_history", Encoders.row(TERMINAL_STATE), TTLConfig.apply(Duration.ofMillis(ttlMs)));
        }

        @Override
        public scala.collection.Iterator<Row> handleInputRows(String key, scala.collection.Iterator<Row> rows,
                                                              TimerValues timerValues) {
            List<Row> txns = new ArrayList<>();
            List<Row> labels = new ArrayList<>();
            while (rows.hasNext()) {
                Row r = rows.next();
                (r.isNullAt(label) ? txns : labels).add(r);
            }
            long[] times = new long[0], frauds = new long[0];
            List<String> ids = new ArrayList<>();
            long lastPruned = Long.MIN_VALUE;
            if (state.exists()) {
                Row s = state.get();
                times = toLongs(s.getList(0));
                frauds = toLongs(s.getList(1));
                ids = new ArrayList<>(s.<String>getList(2));
                lastPruned = s.getLong(3);
            }
            int nf = frauds.length;
            frauds = Arrays.copyOf(frauds, nf + labels.size());
            for (Row r : labels) {
                if (!r.getBoolean(label) || r.isNullAt(eventTime) || r.isNullAt(txnId)) continue;
                String id = r.getString(txnId);
                if (ids.contains(id)) continue;  // a label delivered twice counts once
                int before = nf;
                nf = insert(frauds, null, nf, r.getLong(eventTime), 0);
                ids.add(position(frauds, nf, r.getLong(eventTime), before), id);
            }
            txns.sort(Comparator.comparingLong((Row r) -> r.getLong(eventTime)).thenComparing(r -> r.getString(txnId)));
            int n = times.length;
            times = Arrays.copyOf(times, n + txns.size());
            List<Row> out = new ArrayList<>(txns.size());
            for (Row r : txns) {
                long t = r.getLong(eventTime);
                out.add(withFeatures(r, label, concat(terminalFeatures(times, n, frauds, nf, t, delayMs),
                                                      fraudFeatures(times, n, frauds, nf, lastPruned, t, delayMs))));
                n = insert(times, null, n, t, 0);
            }
            long newest = Math.max(n > 0 ? times[n - 1] : 0, nf > 0 ? frauds[nf - 1] : 0);
            long from = newest - delayMs - LONGEST * DAY_MS;
            n = keepAfter(times, null, n, from);
            int first = 0;
            while (first < nf && frauds[first] <= from) first++;
            if (first > 0) lastPruned = Math.max(lastPruned, frauds[first - 1]);
            long[] keptFrauds = Arrays.copyOfRange(frauds, first, nf);
            List<String> keptIds = new ArrayList<>(ids.subList(first, nf));
            state.update(RowFactory.create(Arrays.copyOf(times, n), keptFrauds, keptIds.toArray(new String[0]), lastPruned));
            return scala.jdk.javaapi.CollectionConverters.asScala(out.iterator());
        }

        /** Where `insert` put time t (the last index holding t among the first n). */
        static int position(long[] times, int n, long t, int before) {
            for (int i = n - 1; i >= 0; i--) {
                if (times[i] == t) return i;
            }
            return before;
        }
    }
}

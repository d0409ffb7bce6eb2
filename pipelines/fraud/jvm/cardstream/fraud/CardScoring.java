package cardstream.fraud;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * The stateful path's scoring in the JVM: Spark's transformWithState keyed by card, one value of
 * state per card (its profile), the three analyzers of LiveProfiles (mirrors of
 * pipelines/fraud/analyzers.py) run over each card's new transactions in event order.
 *
 * <p>Why in the JVM: the Python processor paid a state-server round trip per card read and write
 * and Arrow both ways, most of a batch's time. The TTL is Spark's own, per card, from the batch's
 * processing time (kept in the offset log: a replayed batch expires the same cards).
 * The output rows are pipelines.fraud.state.SCORED_FIELDS, in that order.
 */
public final class CardScoring {
    private CardScoring() {}

    static final StructType PROFILE = new StructType()
        .add("count", DataTypes.LongType).add("mean", DataTypes.DoubleType)
        .add("lat", DataTypes.DoubleType).add("lon", DataTypes.DoubleType)
        .add("place_time", DataTypes.LongType).add("times", DataTypes.StringType)
        .add("last_seen", DataTypes.LongType);

    /**
     * Score `valid` (txn_id, card_id, merchant_id, amount_cents, lat, lon, event_time, produced_at,
     * offset; with its watermark) per card.
     *
     * @param scoredDdl the output schema (SCORED_DDL), so Python stays the one place that names it
     * @param limits pipelines.fraud.analyzers.limits_text(Limits)
     */
    public static Dataset<Row> score(Dataset<Row> valid, String scoredDdl, String limits, long ttlMs) {
        StructType out = StructType.fromDDL(scoredDdl);
        LiveProfiles.Limits l = LiveProfiles.Limits.parse(limits);
        return History.byColumn(valid, valid.col("card_id"))
            .transformWithState(new Processor(l, ttlMs, valid.schema(), out), TimeMode.ProcessingTime(),
                                OutputMode.Append(), Encoders.row(out));
    }

    static final class Processor extends StatefulProcessor<String, Row, Row> {
        private final LiveProfiles.Limits limits;
        private final long ttlMs;
        private final int txnId, merchant, amount, lat, lon, eventTime, producedAt, offset;
        private transient ValueState<Row> profile;

        Processor(LiveProfiles.Limits limits, long ttlMs, StructType in, StructType out) {
            this.limits = limits;
            this.ttlMs = ttlMs;
            txnId = in.fieldIndex("txn_id"); merchant = in.fieldIndex("merchant_id");
            amount = in.fieldIndex("amount_cents"); lat = in.fieldIndex("lat"); lon = in.fieldIndex("lon");
            eventTime = in.fieldIndex("event_time"); producedAt = in.fieldIndex("produced_at");
            offset = in.fieldIndex("offset");
            if (out.fields().length != 16) {
                throw new IllegalArgumentException("CardScoring writes 16 columns, SCORED_DDL has " + out.fields().length);
            }
        }

        @Override
        public void init(OutputMode outputMode, TimeMode timeMode) {
            profile = getHandle().getValueState("profile", Encoders.row(PROFILE), TTLConfig.apply(Duration.ofMillis(ttlMs)));
        }

        @Override
        public scala.collection.Iterator<Row> handleInputRows(String card, scala.collection.Iterator<Row> rows,
                                                              TimerValues timerValues) {
            List<Row> batch = new ArrayList<>();
            while (rows.hasNext()) batch.add(rows.next());
            batch.sort(Comparator.comparingLong((Row r) -> r.getLong(eventTime)).thenComparingLong(r -> r.getLong(offset)));
            LiveProfiles.Card c = profile.exists() ? fromRow(profile.get()) : new LiveProfiles.Card();
            long watermark = timerValues.getCurrentWatermarkInMs();
            List<Row> out = new ArrayList<>(batch.size());
            for (Row r : batch) {
                long t = r.getLong(eventTime);
                double ticket = LiveProfiles.avgTicket(c, r.getLong(amount), limits);
                // no coordinates (a replayed history without places): the proximity analyzer has no opinion
                double place = r.isNullAt(lat) || r.isNullAt(lon) ? 0.0
                    : LiveProfiles.proximity(c, r.getDouble(lat), r.getDouble(lon), t, limits, false);
                double velocity = LiveProfiles.velocity(c, t, limits, false);
                out.add(RowFactory.create(r.getString(txnId), card, r.getString(merchant), r.getLong(amount), t,
                                          r.getLong(producedAt), ticket, place, velocity, watermark > 0 && t < watermark,
                                          c.hasTicket ? c.count : null, c.hasTicket ? c.mean : null,
                                          c.hasPlace ? c.lat : null, c.hasPlace ? c.lon : null,
                                          c.hasPlace ? c.placeTime : null, times(c)));
            }
            profile.update(toRow(c, timerValues.getCurrentProcessingTimeInMs()));
            return scala.jdk.javaapi.CollectionConverters.asScala(out.iterator());
        }

        static String times(LiveProfiles.Card c) {
            return LiveProfiles.timesText(c.times);
        }

        static Row toRow(LiveProfiles.Card c, long now) {
            return RowFactory.create(c.hasTicket ? c.count : null, c.hasTicket ? c.mean : null,
                                     c.hasPlace ? c.lat : null, c.hasPlace ? c.lon : null,
                                     c.hasPlace ? c.placeTime : null, times(c), now);
        }

        static LiveProfiles.Card fromRow(Row r) {
            LiveProfiles.Card c = new LiveProfiles.Card();
            if (!r.isNullAt(0)) {
                c.hasTicket = true;
                c.count = r.getLong(0);
                c.mean = r.getDouble(1);
            }
            if (!r.isNullAt(4)) {
                c.hasPlace = true;
                c.lat = r.getDouble(2);
                c.lon = r.getDouble(3);
                c.placeTime = r.getLong(4);
            }
            c.times = LiveProfiles.parseTimes(r.isNullAt(5) ? "" : r.getString(5));
            return c;
        }
    }
}

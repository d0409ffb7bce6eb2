package cardstream.fraud;

import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The real-time path's card profiles, kept live inside the executor JVM.
 *
 * <p>Spark's real-time mode runs no state store and no Python, but a projection may call a static
 * Java method (SQL {@code reflect}). Its tasks are long-running, one per Kafka partition, and the
 * simulator keys transactions by card, so every card is read, in order, by one task: a map per
 * partition, folded transaction by transaction, is exactly the stateful analyzers' profile without
 * a checkpoint. The three analyzers here mirror {@code pipelines/fraud/analyzers.py} line by line
 * (a Spark test checks they agree); the aggregator stays in SQL.
 *
 * <p>The profiles start from a seed the driver writes (the stateful path's profiles and the Kafka
 * offsets they cover, read in one store transaction). A record at or past the seed's offset is
 * folded; a record before it (a replay) is scored against a copy and folds nothing, so a replay
 * never counts a transaction twice. A partition whose live profiles already cover more than a new
 * seed keeps them (they are fresher); one that covers less is reset from the seed.
 *
 * <p>A decision's profile age ({@code profile_age_ms}) is the age of the newest history the card's
 * profile has folded: its previous transaction's {@code produced_at}, or the seed's cut when it
 * has folded none since (a card the seed did not hold had no history up to the cut). It is never
 * younger than a hole of its partition: a replay cut short (seed.py), or a partition whose first
 * record lies past the seed's offsets (its profiles were rebuilt from the seed by a task that
 * starts later than the seed: another executor, a retried task), so records between were folded
 * by no profile here. It is unknown (empty, a null in the decision) for a transaction on another
 * partition than its card's key would give: a producer not keying by card spreads a card over
 * partitions, and each partition's profile holds only its share.
 */
public final class LiveProfiles {
    private LiveProfiles() {}

    /** Where each analyzer's score ramps from 0 to 1: pipelines.fraud.analyzers.Limits. */
    static final class Limits implements java.io.Serializable {
        int ticketMinHistory = 3;
        double ticketRatioLow = 2.5, ticketRatioHigh = 6.0;
        int ticketHistoryCap = 50;
        long proximityWindowMs = 6L * 3600 * 1000;
        double speedLowKmh = 450.0, speedHighKmh = 1050.0, minDistanceKm = 50.0;
        long minGapMs = 60_000;
        long velocityWindowMs = 60_000;
        double velocityLow = 3, velocityHigh = 7;
        long velocityBurstMs = 5_000;
        double velocityBurstLow = 1, velocityBurstHigh = 2;
        int velocityKeep = 32;
        long ttlMs = 24L * 3600 * 1000;

        /** Tab-separated key=value pairs (pipelines.fraud.analyzers.limits_text). */
        static Limits parse(String pairs) {
            Limits l = new Limits();
            for (String pair : pairs.split("\t")) {
                if (pair.isEmpty()) continue;
                int eq = pair.indexOf('=');
                l.set(pair.substring(0, eq), pair.substring(eq + 1));
            }
            return l;
        }

        void set(String key, String v) {
            switch (key) {
                case "ticket_min_history": ticketMinHistory = Integer.parseInt(v); break;
                case "ticket_ratio_low": ticketRatioLow = Double.parseDouble(v); break;
                case "ticket_ratio_high": ticketRatioHigh = Double.parseDouble(v); break;
                case "ticket_history_cap": ticketHistoryCap = Integer.parseInt(v); break;
                case "proximity_window_ms": proximityWindowMs = Long.parseLong(v); break;
                case "speed_low_kmh": speedLowKmh = Double.parseDouble(v); break;
                case "speed_high_kmh": speedHighKmh = Double.parseDouble(v); break;
                case "min_distance_km": minDistanceKm = Double.parseDouble(v); break;
                case "min_gap_ms": minGapMs = Long.parseLong(v); break;
                case "velocity_window_ms": velocityWindowMs = Long.parseLong(v); break;
                case "velocity_low": velocityLow = Double.parseDouble(v); break;
                case "velocity_high": velocityHigh = Double.parseDouble(v); break;
                case "velocity_burst_ms": velocityBurstMs = Long.parseLong(v); break;
                case "velocity_burst_low": velocityBurstLow = Double.parseDouble(v); break;
                case "velocity_burst_high": velocityBurstHigh = Double.parseDouble(v); break;
                case "velocity_keep": velocityKeep = Integer.parseInt(v); break;
                case "ttl_ms": ttlMs = Long.parseLong(v); break;
                default: throw new IllegalArgumentException("unknown limit in the seed: " + key);
            }
        }
    }

    /** One card's profile: TicketState, ProximityState and VelocityState of analyzers.py. */
    static final class Card {
        boolean hasTicket, hasPlace;
        long count;
        double mean, lat, lon;
        long placeTime;
        long[] times = new long[0];
        long lastSeenMs;
        long asOf;   // produced_at of the newest transaction folded (the seed's cut if none since)
        // the card's payments over the longest card window (History.java's card state): the model's features
        long[] histTimes = new long[0], histAmounts = new long[0], histOver = new long[0];

        Card copy() {
            Card c = new Card();
            c.hasTicket = hasTicket; c.hasPlace = hasPlace; c.count = count; c.mean = mean;
            c.lat = lat; c.lon = lon; c.placeTime = placeTime; c.times = times; c.lastSeenMs = lastSeenMs;
            c.asOf = asOf; c.histTimes = histTimes; c.histAmounts = histAmounts; c.histOver = histOver;
            return c;
        }
    }

    /** What the driver wrote for one start of the real-time query. */
    static final class Seed {
        final String path;
        String scope = "";
        Limits limits = new Limits();
        final Map<Integer, Long> ends = new HashMap<>();     // snapshot covers offsets < end
        final Map<Integer, Long> holes = new HashMap<>();    // partition -> hole start (ms): see seed.py
        final Map<Integer, Map<String, Card>> cards = new HashMap<>();
        long cut = Long.MIN_VALUE;   // when the seeded profiles were whole (ms)
        int partitions;              // the topic's partitions (0: unknown)
        // the seeded cards' histories hold every payment from this event time on (MAX: not known)
        long historyFrom = Long.MAX_VALUE;
        long historyTtlMs = -1;      // a quiet card keeps its history this long (-1: the limits' ttl)

        Seed(String path) { this.path = path; }
    }

    /** One Kafka partition's live profiles. Only its one real-time task touches it at a time. */
    static final class Part {
        String seedPath;
        long foldFrom;                 // the next offset to fold: records before it are replays
        long holeFrom = Long.MAX_VALUE;  // the profiles miss transactions from then on (MAX: none)
        long lastOffset = -1;
        Decided lastResult;
        // the card windows hold every payment of the partition from this event time on (MIN: all of
        // them, the fold began at the topic's start; MAX: nothing folded yet)
        long historyFrom = Long.MAX_VALUE;
        long folds;
        boolean started;               // it has seen a record
        final HashMap<String, Card> cards = new HashMap<>();
    }

    private static final Map<String, Seed> SEEDS = new ConcurrentHashMap<>();
    private static final Map<String, Part> PARTS = new ConcurrentHashMap<>();
    private static final int SWEEP_EVERY = 8192;

    /**
     * Score one transaction against its card's live profile and fold it in (when it is new).
     *
     * @return "ticket,proximity,velocity,profileAgeMs": the three scores and how old the newest
     *     transaction the profile may be missing is (0 when it has folded every earlier one).
     */
    public static String decide(String seedPath, String cardId, long amountCents, double lat, double lon,
                                long eventTime, int partition, long offset, long producedAt) {
        return core(seedPath, cardId, amountCents, lat, lon, eventTime, partition, offset, producedAt).text;
    }

    /** What one decision saw: decide's text, the card's window features (History.cardFeatures's
     * order, the payment included) and since when its partition's card windows are whole. */
    static final class Decided {
        String text;
        double[] cardWindows;
        long historyFrom;
    }

    static Decided core(String seedPath, String cardId, long amountCents, double lat, double lon,
                        long eventTime, int partition, long offset, long producedAt) {
        Seed seed = seed(seedPath);
        Part part = part(seed, partition);
        synchronized (part) {
            // a projection may be evaluated twice for one row: the second call must not fold again
            if (offset == part.lastOffset && part.lastResult != null) {
                return part.lastResult;
            }
            long now = System.currentTimeMillis();
            if (!part.started) {
                part.started = true;
                // records between the seed's offsets and this one were folded by no profile here
                if (offset > part.foldFrom) part.holeFrom = Math.min(part.holeFrom, seed.cut);
            }
            boolean fold = offset >= part.foldFrom;
            Card stored = part.cards.get(cardId);
            Card card = stored == null ? fresh(seed) : (fold ? stored : stored.copy());
            long asOf = card.asOf;
            Limits l = seed.limits;
            double ticket = avgTicket(card, amountCents, l);
            // NaN: a transaction without coordinates; the proximity analyzer has no opinion on it
            double place = Double.isNaN(lat) || Double.isNaN(lon) ? 0.0 : proximity(card, lat, lon, eventTime, l, !fold);
            double velocity = velocity(card, eventTime, l, !fold);
            double[] windows = cardWindows(card, amountCents, eventTime, fold);
            if (fold && part.historyFrom == Long.MAX_VALUE) part.historyFrom = eventTime;
            if (fold) {
                card.lastSeenMs = now;
                card.asOf = Math.max(card.asOf, producedAt);
                if (stored == null) {
                    part.cards.put(cardId, card);
                }
                part.foldFrom = offset + 1;
                if (++part.folds % SWEEP_EVERY == 0) {
                    sweep(part, now - l.ttlMs, now - (seed.historyTtlMs < 0 ? l.ttlMs : seed.historyTtlMs));
                }
            }
            Decided out = new Decided();
            out.text = ticket + "," + place + "," + velocity + "," + profileAge(seed, cardId, partition, asOf, part.holeFrom, now);
            out.cardWindows = windows;
            out.historyFrom = part.historyFrom;
            part.lastOffset = offset;
            part.lastResult = out;
            return out;
        }
    }

    /** A card the partition holds no profile of: no history up to the seed's cut. */
    private static Card fresh(Seed seed) {
        Card c = new Card();
        c.asOf = seed.cut;
        return c;
    }

    /** The decision's profile_age_ms as text: "" (unknown) for a card off its key's partition. */
    static String profileAge(Seed seed, String cardId, int partition, long asOf, long holeFrom, long now) {
        if (seed.partitions > 0 && partitionOf(cardId, seed.partitions) != partition) return "";
        long whole = Math.min(asOf, holeFrom);
        return whole == Long.MIN_VALUE ? "" : Long.toString(Math.max(0L, now - whole));
    }

    /** The partition Kafka's default partitioner gives a record keyed by `cardId` (murmur2). */
    static int partitionOf(String cardId, int partitions) {
        return (murmur2(cardId.getBytes(StandardCharsets.UTF_8)) & 0x7fffffff) % partitions;
    }

    /** Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2; infra/partitioner.py). */
    static int murmur2(byte[] data) {
        int length = data.length, m = 0x5bd1e995, r = 24;
        int h = 0x9747b28c ^ length;
        int length4 = length / 4;
        for (int i = 0; i < length4; i++) {
            int i4 = i * 4;
            int k = (data[i4] & 0xff) + ((data[i4 + 1] & 0xff) << 8) + ((data[i4 + 2] & 0xff) << 16)
                + ((data[i4 + 3] & 0xff) << 24);
            k *= m;
            k ^= k >>> r;
            k *= m;
            h *= m;
            h ^= k;
        }
        switch (length % 4) {
            case 3: h ^= (data[(length & ~3) + 2] & 0xff) << 16;
            case 2: h ^= (data[(length & ~3) + 1] & 0xff) << 8;
            case 1: h ^= data[length & ~3] & 0xff;
                h *= m;
        }
        h ^= h >>> 13;
        h *= m;
        h ^= h >>> 15;
        return h;
    }

    /** The longest card window the live history keeps (History.java keeps the same). */
    static final long HISTORY_MS = History.CARD_LONGEST * History.DAY_MS;

    /**
     * The card's features for this payment, as History's card operator computes them (features.py
     * CARD_FEATURES then CARD_PAST_FEATURES), folding it into the card's history when it is new. A replay is counted against the strictly
     * earlier payments only, as the analyzers treat it.
     */
    static double[] cardWindows(Card c, long amountCents, long t, boolean fold) {
        // History.CardProcessor's steps for one payment: its past (before it), then it inserted
        int n = c.histTimes.length;
        long[] times = Arrays.copyOf(c.histTimes, n + 1), amounts = Arrays.copyOf(c.histAmounts, n + 1),
            over = Arrays.copyOf(c.histOver, n + 1);
        if (!fold) {
            int kept = 0;
            for (int i = 0; i < n; i++) {
                if (times[i] < t) { times[kept] = times[i]; amounts[kept] = amounts[i]; over[kept] = over[i]; kept++; }
            }
            n = kept;
        }
        double[] past = History.pastFeatures(times, amounts, n, t, amountCents);
        int at = History.insertAt(times, n, t);
        History.shift(amounts, n, at, amountCents);
        History.shift(over, n, at, (long) past[past.length - 1]);
        n++;
        double[] out = History.concat(History.concat(History.cardFeatures(times, amounts, n, t),
                                                     Arrays.copyOf(past, past.length - 1)),
                                      History.overMeanCounts(times, over, n, t));
        if (fold) {
            int first = 0;
            while (first < n && times[first] <= times[n - 1] - HISTORY_MS) first++;
            c.histTimes = Arrays.copyOfRange(times, first, n);
            c.histAmounts = Arrays.copyOfRange(amounts, first, n);
            c.histOver = Arrays.copyOfRange(over, first, n);
        }
        return out;
    }

    // ------------------------------------------------------------------ the analyzers

    static double ramp(double x, double low, double high) {
        if (x <= low) return 0.0;
        if (x >= high) return 1.0;
        return (x - low) / (high - low);
    }

    static double avgTicket(Card c, long amountCents, Limits l) {
        double amount = (double) amountCents;
        if (!c.hasTicket || c.count == 0) {
            c.hasTicket = true;
            c.count = 1;
            c.mean = amount;
            return 0.0;
        }
        double score = c.count >= l.ticketMinHistory && c.mean > 0
            ? ramp(amount / c.mean, l.ticketRatioLow, l.ticketRatioHigh) : 0.0;
        double folded = c.count >= l.ticketMinHistory ? Math.min(amount, c.mean * l.ticketRatioLow) : amount;
        long weight = Math.min(c.count, l.ticketHistoryCap);
        c.mean = (c.mean * weight + folded) / (weight + 1);
        c.count += 1;
        return score;
    }

    static double haversineKm(double lat1, double lon1, double lat2, double lon2) {
        double p1 = Math.toRadians(lat1), p2 = Math.toRadians(lat2);
        double dp = p2 - p1, dl = Math.toRadians(lon2 - lon1);
        double a = Math.pow(Math.sin(dp / 2), 2) + Math.cos(p1) * Math.cos(p2) * Math.pow(Math.sin(dl / 2), 2);
        return 2 * 6371.0088 * Math.asin(Math.min(1.0, Math.sqrt(a)));
    }

    /**
     * A replay is scored against a profile that already holds it and maybe later transactions of
     * the card: its place is compared only with a strictly earlier one, and its window counts only
     * strictly earlier times, so it is not judged against its own future (nor counted twice).
     */
    static double proximity(Card c, double lat, double lon, long eventTime, Limits l, boolean replay) {
        if (replay && c.hasPlace && c.placeTime >= eventTime) {
            return 0.0;
        }
        if (!c.hasPlace) {
            c.hasPlace = true;
            c.lat = lat; c.lon = lon; c.placeTime = eventTime;
            return 0.0;
        }
        long gap = eventTime - c.placeTime;
        double score = 0.0;
        if (Math.abs(gap) <= l.proximityWindowMs) {
            double km = haversineKm(c.lat, c.lon, lat, lon);
            if (km >= l.minDistanceKm) {
                double hours = Math.max(Math.abs(gap), l.minGapMs) / 3_600_000.0;
                score = ramp(km / hours, l.speedLowKmh, l.speedHighKmh);
            }
        }
        if (gap >= 0) {
            c.lat = lat; c.lon = lon; c.placeTime = eventTime;
        }
        return score;
    }

    static double velocity(Card c, long t, Limits l, boolean replay) {
        long[] before = replay ? Arrays.stream(c.times).filter(x -> x < t).toArray() : c.times;
        long[] times = Arrays.copyOf(before, before.length + 1);
        times[before.length] = t;
        Arrays.sort(times);
        long newest = times[times.length - 1];
        int inWindow = 0, inBurst = 0, recent = 0;
        for (long x : times) {
            if (t - l.velocityWindowMs < x && x <= t) inWindow++;
            if (t - l.velocityBurstMs < x && x <= t) inBurst++;
            if (x > newest - l.velocityWindowMs) recent++;
        }
        long[] kept = new long[Math.min(recent, l.velocityKeep)];
        int skip = recent - kept.length, k = 0, seen = 0;
        for (long x : times) {
            if (x > newest - l.velocityWindowMs && seen++ >= skip) kept[k++] = x;
        }
        c.times = kept;
        return Math.max(ramp(inWindow, l.velocityLow, l.velocityHigh),
                        ramp(inBurst, l.velocityBurstLow, l.velocityBurstHigh));
    }

    /** A profile's recent event times as pipelines.fraud.state writes them: "t1,t2,..." ("" none). */
    static long[] parseTimes(String text) {
        return text == null || text.isEmpty() ? new long[0]
            : Arrays.stream(text.split(",")).mapToLong(Long::parseLong).toArray();
    }

    static String timesText(long[] times) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < times.length; i++) {
            if (i > 0) b.append(',');
            b.append(times[i]);
        }
        return b.toString();
    }

    // ------------------------------------------------------------------ seeds and partitions

    private static Part part(Seed seed, int partition) {
        String key = seed.scope + "#" + partition;
        Part cur = PARTS.get(key);
        if (cur != null && cur.seedPath.equals(seed.path)) {
            return cur;
        }
        synchronized (PARTS) {
            cur = PARTS.get(key);
            if (cur != null && cur.seedPath.equals(seed.path)) {
                return cur;
            }
            Long end = seed.ends.get(partition);
            if (cur != null && (end == null || cur.foldFrom >= end)) {
                synchronized (cur) {   // live profiles cover at least the seed: keep them
                    cur.seedPath = seed.path;
                }
                return cur;
            }
            Part p = new Part();
            p.seedPath = seed.path;
            p.foldFrom = end == null ? 0 : end;
            Long hole = seed.holes.get(partition);
            if (hole != null) p.holeFrom = hole;
            if (p.foldFrom == 0 && hole == null) p.historyFrom = Long.MIN_VALUE;  // it folds the whole topic
            // the seed's card histories are whole since then, and it folds every record after them
            else if (hole == null) p.historyFrom = seed.historyFrom;
            Map<String, Card> cards = seed.cards.get(partition);
            if (cards != null) {
                for (Map.Entry<String, Card> e : cards.entrySet()) p.cards.put(e.getKey(), e.getValue().copy());
            }
            PARTS.put(key, p);
            return p;
        }
    }

    /** As the stateful path's TTLs: a card quiet since `before` loses its analyzers' profile, one
     * quiet since `historyBefore` (longer) its event-time history too. */
    private static void sweep(Part part, long before, long historyBefore) {
        for (Iterator<Card> it = part.cards.values().iterator(); it.hasNext(); ) {
            Card c = it.next();
            if (c.lastSeenMs >= before) continue;
            if (c.lastSeenMs < historyBefore || c.histTimes.length == 0) {
                it.remove();
            } else if (c.hasTicket || c.hasPlace || c.times.length > 0) {
                c.hasTicket = false; c.count = 0; c.mean = 0;
                c.hasPlace = false; c.times = new long[0];
            }
        }
    }

    private static Seed seed(String path) {
        Seed s = SEEDS.get(path);
        if (s != null) return s;
        synchronized (SEEDS) {
            s = SEEDS.get(path);
            if (s == null) {
                try {
                    s = read(path);
                } catch (IOException e) {
                    throw new IllegalStateException("cannot read the real-time path's profile seed " + path + ": " + e, e);
                }
                if (SEEDS.size() > 4) SEEDS.clear();   // one per query start; older ones are done with
                SEEDS.put(path, s);
            }
            return s;
        }
    }

    /** The seed file: pipelines/fraud/seed.py writes it (one tab-separated line per fact). */
    static Seed read(String path) throws IOException {
        Seed s = new Seed(path);
        Path file = Paths.get(path);
        try (BufferedReader in = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            String line;
            boolean ended = false;
            while ((line = in.readLine()) != null) {
                String[] f = line.split("\t", -1);
                switch (f[0]) {
                    case "scope": s.scope = f[1]; break;
                    case "limits": s.limits = Limits.parse(line.substring("limits\t".length())); break;
                    case "end": s.ends.put(Integer.parseInt(f[1]), Long.parseLong(f[2])); break;
                    case "hole": s.holes.put(Integer.parseInt(f[1]), Long.parseLong(f[2])); break;
                    case "cut": s.cut = Long.parseLong(f[1]); break;
                    case "partitions": s.partitions = Integer.parseInt(f[1]); break;
                    case "history_from": s.historyFrom = Long.parseLong(f[1]); break;
                    case "history_ttl": s.historyTtlMs = Long.parseLong(f[1]); break;
                    case "card": s.cards.computeIfAbsent(Integer.parseInt(f[1]), k -> new HashMap<>()).put(f[2], card(f, s.cut)); break;
                    case "end-of-seed": ended = true; break;
                    default: throw new IOException("unknown line in the seed: " + f[0]);
                }
            }
            if (!ended) throw new IOException("the seed is incomplete (no end-of-seed line)");
        }
        return s;
    }

    private static Card card(String[] f, long cut) {
        Card c = new Card();
        if (!f[3].isEmpty()) {
            c.hasTicket = true;
            c.count = Long.parseLong(f[3]);
            c.mean = Double.parseDouble(f[4]);
        }
        if (!f[7].isEmpty()) {
            c.hasPlace = true;
            c.lat = Double.parseDouble(f[5]);
            c.lon = Double.parseDouble(f[6]);
            c.placeTime = Long.parseLong(f[7]);
        }
        c.times = parseTimes(f[8]);
        if (f.length > 9 && !f[9].isEmpty()) {
            // the stateful path's card history (History.historyText): "times;amounts;over"
            String[] h = f[9].split(";", -1);
            c.histTimes = parseTimes(h[0]);
            c.histAmounts = parseTimes(h[1]);
            c.histOver = parseTimes(h[2]);
        }
        c.lastSeenMs = System.currentTimeMillis();
        c.asOf = cut;
        return c;
    }
}

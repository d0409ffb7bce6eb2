package cardstream.fraud;

import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The real-time path's aggregator: the model in use, scored in the executor JVM on the features
 * it was trained on, or the rules when a feature cannot be served for a payment.
 *
 * <p>Two files the driver writes (whole, by rename) say what to serve, and a daemon thread reloads
 * them when they change, so the real-time tasks never wait on a read:
 * <ul>
 * <li>the serving file (pipelines/fraud/realtime.py {@code publish_model}): the version, its
 * threshold and model.json (ModelScore), the card features LiveProfiles computes in order, and the
 * terminal table's file; a version the path cannot serve is written as model 0 with the sentence;
 * <li>the terminal table (pipelines/fraud/realtime.py {@code TerminalTable}): per terminal, the
 * terminal features the stateful companion computed for its newest decided payment, with that
 * payment's event time. Terminal windows end the feedback delay before the payment, so they move
 * slowly; a payment more than the file's {@code max_gap_ms} after that one is decided by the rules.
 * </ul>
 * Per feature by name: amount and the calendar from the payment, the analyzers' scores and the
 * card windows from the card's live profile (LiveProfiles), the terminal's from the table.
 */
public final class LiveModel {
    private LiveModel() {}

    static final int AMOUNT = 0, WEEKEND = 1, NIGHT = 2, SCORE = 3, CARD = 4, TERMINAL = 5;
    static final String[] SCORES = {"score_avg_ticket", "score_proximity", "score_velocity"};
    static final long DAY_MS = 86_400_000L;

    static final class Serving {
        int version;
        double threshold;
        ModelScore model;
        String why = "";
        String terminalsPath;
        long maxGapMs;
        int[] kind, index;
        String[] names;
        long cardSpanMs;     // the longest card window the model's features need
        long servingStamp, terminalsStamp;
        volatile Terminals terminals = Terminals.EMPTY;
    }

    static final class Terminals {
        static final Terminals EMPTY = new Terminals();
        final Map<String, Integer> columns = new HashMap<>();
        final Map<String, double[]> rows = new HashMap<>();   // merchant -> values..., event time last
        // every terminal the companion decided from then on is in the table (MAX: not known), and it
        // has decided up to decidedTo: an absent terminal had no payment in windows before that
        long completeFrom = Long.MAX_VALUE, decidedTo = Long.MIN_VALUE, delayMs;
        double[] empty;   // a terminal's features with no payment in its windows (+ a time slot)
    }

    /** How far back a terminal feature can look: the days since its last fraud are capped at 90. */
    static final long TERMINAL_SPAN_MS = (long) Math.max(History.LONGEST, History.NO_FRAUD_DAYS) * DAY_MS;

    private static final Map<String, Serving> SERVING = new ConcurrentHashMap<>();
    private static volatile Thread watcher;

    /**
     * Score one payment: LiveProfiles.decide's "ticket,proximity,velocity,profileAgeMs", then tab-
     * separated the version that decided (0: the rules), the model's score and verdict (1/0; empty
     * for the rules: the SQL aggregator decides), the explanation (top three contributions' JSON)
     * and, when the rules decided although a model is in use, why in one sentence.
     */
    public static String decide(String seedPath, String servingPath, String cardId, String merchantId,
                                long amountCents, double lat, double lon, long eventTime, int partition,
                                long offset, long producedAt) {
        LiveProfiles.Decided d = LiveProfiles.core(seedPath, cardId, amountCents, lat, lon, eventTime, partition,
                                                   offset, producedAt);
        Serving s = serving(servingPath);
        if (s.model == null) return d.text + "\t0\t\t\t\t" + s.why;
        String[] scores = d.text.split(",", 4);
        double[] x = new double[s.kind.length];
        double[] terminal = null;
        Terminals terms = s.terminals;
        for (int i = 0; i < x.length; i++) {
            switch (s.kind[i]) {
                case AMOUNT: x[i] = amountCents / 100.0; break;
                case WEEKEND: {
                    long dow = Math.floorMod(Math.floorDiv(eventTime, DAY_MS) + 3, 7);  // 1970-01-01: Thursday (3)
                    x[i] = dow >= 5 ? 1.0 : 0.0;
                    break;
                }
                case NIGHT: x[i] = Math.floorMod(eventTime, DAY_MS) / 3_600_000L <= 6 ? 1.0 : 0.0; break;
                case SCORE: x[i] = Double.parseDouble(scores[s.index[i]]); break;
                case CARD:
                    if (eventTime - s.cardSpanMs < d.historyFrom) {
                        return rules(d, s, "the real-time path's card windows hold payments from "
                            + (d.historyFrom == Long.MAX_VALUE ? "none yet" : Instant.ofEpochMilli(d.historyFrom).toString())
                            + " on, fewer than the " + s.cardSpanMs / DAY_MS + " days model " + s.version + " needs");
                    }
                    x[i] = d.cardWindows[s.index[i]];
                    break;
                default: {
                    if (terminal == null) {
                        terminal = terms.rows.get(merchantId);
                        long windowEnd = eventTime - terms.delayMs;
                        if (terminal == null && terms.empty != null && terms.decidedTo >= windowEnd
                                && terms.completeFrom <= windowEnd - TERMINAL_SPAN_MS) {
                            terminal = terms.empty;   // no payment there in any of its windows: exactly empty
                        } else if (terminal == null) {
                            return rules(d, s, "terminal " + merchantId + " has no features from the stateful path yet");
                        }
                        long gap = terminal == terms.empty ? 0 : Math.abs(eventTime - (long) terminal[terminal.length - 1]);
                        if (gap > s.maxGapMs) {
                            return rules(d, s, "terminal " + merchantId + "'s features are of a payment "
                                + gap / 60_000 + " min away from this one (the real-time path uses them up to "
                                + s.maxGapMs / 60_000 + " min)");
                        }
                    }
                    Integer column = terms.columns.get(s.names[i]);
                    if (column == null) {
                        return rules(d, s, "the stateful path publishes no " + s.names[i]);
                    }
                    x[i] = terminal[column];
                }
            }
        }
        double p = s.model.probability(x);
        return d.text + "\t" + s.version + "\t" + p + "\t" + (p >= s.threshold ? "1" : "0") + "\t"
            + s.model.explanation(x, 3) + "\t";
    }

    private static String rules(LiveProfiles.Decided d, Serving s, String why) {
        return d.text + "\t0\t\t\t\t" + why + ": decided with the rules (model 0)";
    }

    // ------------------------------------------------------------------ the files

    static Serving serving(String path) {
        Serving s = SERVING.get(path);
        if (s != null) return s;
        synchronized (SERVING) {
            s = SERVING.get(path);
            if (s == null) {
                s = readServing(path);
                SERVING.put(path, s);
                startWatcher();
            }
            return s;
        }
    }

    private static void startWatcher() {
        if (watcher != null) return;
        Thread t = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(500);
                    for (Map.Entry<String, Serving> e : SERVING.entrySet()) {
                        if (!e.getKey().isEmpty()) refresh(e.getKey(), e.getValue());
                    }
                } catch (InterruptedException ie) {
                    return;
                } catch (RuntimeException ignored) {
                    // a file being replaced: the next poll reads it
                }
            }
        }, "cardstream-live-model");
        t.setDaemon(true);
        t.start();
        watcher = t;
    }

    private static long stamp(String path) {
        try {
            Path p = Paths.get(path);
            return Files.getLastModifiedTime(p).toMillis() * 31 + Files.size(p);
        } catch (IOException e) {
            return -1;
        }
    }

    private static void refresh(String path, Serving cur) {
        Serving s = cur;
        if (stamp(path) != cur.servingStamp) {
            s = readServing(path);   // reads its terminal table too
            SERVING.put(path, s);
        }
        if (s.terminalsPath != null) {
            long t = stamp(s.terminalsPath);
            if (t != s.terminalsStamp && t != -1) {
                try {
                    s.terminals = readTerminals(s.terminalsPath);
                    s.terminalsStamp = t;
                } catch (IOException ignored) {
                    // half-replaced or gone: keep the table we have
                }
            }
        }
    }

    /** The serving file; one that cannot be read is served as the rules, saying why. */
    static Serving readServing(String path) {
        Serving s = new Serving();
        if (path.isEmpty()) return s;   // no serving file: the rules, nothing to say
        s.servingStamp = stamp(path);
        Map<String, String> kv = new HashMap<>();
        try (BufferedReader in = Files.newBufferedReader(Paths.get(path), StandardCharsets.UTF_8)) {
            String line;
            while ((line = in.readLine()) != null) {
                int tab = line.indexOf('\t');
                kv.put(tab < 0 ? line : line.substring(0, tab), tab < 0 ? "" : line.substring(tab + 1));
            }
        } catch (IOException e) {
            s.why = "the real-time path's serving file " + path + " cannot be read (" + e + "): decided with the rules (model 0)";
            return s;
        }
        if (!kv.containsKey("end")) {
            s.why = "the real-time path's serving file " + path + " is incomplete: decided with the rules (model 0)";
            return s;
        }
        s.version = Integer.parseInt(kv.getOrDefault("version", "0"));
        s.why = kv.getOrDefault("why", "");
        if (s.version == 0) return s;
        try {
            s.model = ModelScore.load(kv.get("model"));
        } catch (RuntimeException e) {
            s.version = 0;
            s.why = "model " + kv.get("version") + " cannot be read by the real-time path (" + e.getMessage()
                + "): decided with the rules (model 0)";
            return s;
        }
        s.threshold = Double.parseDouble(kv.get("threshold"));
        s.terminalsPath = kv.get("terminals");
        s.maxGapMs = Long.parseLong(kv.getOrDefault("terminal_max_gap_ms", "0"));
        List<String> cards = List.of(kv.getOrDefault("card_features", "").split(","));
        s.names = s.model.features();
        s.kind = new int[s.names.length];
        s.index = new int[s.names.length];
        for (int i = 0; i < s.names.length; i++) {
            String n = s.names[i];
            int score = List.of(SCORES).indexOf(n);
            if (n.equals("amount")) s.kind[i] = AMOUNT;
            else if (n.equals("is_weekend")) s.kind[i] = WEEKEND;
            else if (n.equals("is_night")) s.kind[i] = NIGHT;
            else if (score >= 0) { s.kind[i] = SCORE; s.index[i] = score; }
            else if (cards.contains(n)) {
                s.kind[i] = CARD;
                s.index[i] = cards.indexOf(n);
                // a payment over its past mean is judged on its own 30 days before: those count too
                long span = days(n) + (n.startsWith("c_over_mean_") ? History.PAST_DAYS[0] : 0);
                s.cardSpanMs = Math.max(s.cardSpanMs, span * DAY_MS);
            } else if (n.startsWith("t_")) s.kind[i] = TERMINAL;
            else {
                s.model = null;
                s.version = 0;
                s.why = "the real-time path cannot compute " + n + ": decided with the rules (model 0)";
                return s;
            }
        }
        s.terminals = Terminals.EMPTY;
        s.terminalsStamp = -2;
        if (s.terminalsPath != null) {
            try {
                long t = stamp(s.terminalsPath);
                if (t != -1) {
                    s.terminals = readTerminals(s.terminalsPath);
                    s.terminalsStamp = t;
                }
            } catch (IOException ignored) {
                // the watcher reads it once it is whole
            }
        }
        return s;
    }

    /** "c_count_7d" -> 7: a card window's length in days from its name. */
    static long days(String name) {
        int end = name.lastIndexOf('d'), start = name.lastIndexOf('_', end);
        return Long.parseLong(name.substring(start + 1, end));
    }

    static Terminals readTerminals(String path) throws IOException {
        Terminals t = new Terminals();
        boolean ended = false;
        try (BufferedReader in = Files.newBufferedReader(Paths.get(path), StandardCharsets.UTF_8)) {
            String line;
            int width = 0;
            while ((line = in.readLine()) != null) {
                String[] f = line.split("\t", -1);
                if (f[0].equals("names") && t.columns.isEmpty()) {
                    for (int i = 1; i < f.length; i++) t.columns.put(f[i], i - 1);
                    width = f.length - 1;
                } else if (f[0].equals("end")) {
                    ended = true;
                } else if (f[0].equals("complete_from")) {
                    t.completeFrom = Long.parseLong(f[1]);
                } else if (f[0].equals("decided_to")) {
                    t.decidedTo = Long.parseLong(f[1]);
                } else if (f[0].equals("delay_ms")) {
                    t.delayMs = Long.parseLong(f[1]);
                } else if (f[0].equals("empty")) {
                    t.empty = new double[width + 1];
                    for (int i = 0; i < width; i++) t.empty[i] = Double.parseDouble(f[1 + i]);
                } else if (f[0].equals("terminal")) {
                    double[] v = new double[width + 1];
                    for (int i = 0; i < width; i++) v[i] = f[3 + i].isEmpty() ? Double.NaN : Double.parseDouble(f[3 + i]);
                    v[width] = Long.parseLong(f[2]);
                    t.rows.put(f[1], v);
                }
            }
        }
        if (!ended) throw new IOException("the terminal table is incomplete");
        return t;
    }
}

package cardstream.fraud;

import java.io.IOException;
import java.math.BigDecimal;
import java.math.RoundingMode;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.ml.classification.GBTClassificationModel;
import org.apache.spark.ml.classification.LogisticRegressionModel;
import org.apache.spark.ml.classification.RandomForestClassificationModel;
import org.apache.spark.ml.tree.ContinuousSplit;
import org.apache.spark.ml.tree.InternalNode;
import org.apache.spark.ml.tree.Node;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * A fitted score aggregator outside Spark MLlib: the plain JSON that pipelines/fraud/train.py
 * writes beside a version's MLlib files ({@code model.json}), loaded and scored in the JVM, so the
 * real-time path (which runs no MLlib transform) decides with the same model.
 *
 * <p>The JSON holds the features in order (MLlib's VectorAssembler with handleInvalid=keep: a
 * missing value is NaN), and either a logistic regression's coefficients and intercept (MLlib
 * returns them on the features' own scale when it standardizes, so serving needs no scaler) or
 * every tree of a random forest or of gradient-boosted trees: per node its split feature and
 * threshold (left when value <= threshold, as MLlib's ContinuousSplit; NaN goes right), children
 * and value, with the ensemble's combination rule. {@link #probability} is MLlib's: a Spark test
 * checks the two agree to 1e-9 (tests/spark/test_model_export.py).
 *
 * <p>Explanations ({@link #contributions}): for a logistic regression coefficient x (value -
 * training mean), the exact decomposition of its log-odds; for trees Saabas' path attribution:
 * walking a tree from its root, each split moves the node value by (child - parent), credited to
 * the split's feature. Summed over the ensemble it is exact (bias + contributions = the forest's
 * mean probability, or the boosted margin), costs one walk per tree, and needs nothing but the
 * tree, unlike TreeSHAP's (exact Shapley values, but quadratic in depth per tree and per row).
 */
public final class ModelScore {
    public static final int FORMAT = 1;

    final String kind;
    final String[] features;
    final double[] coefficients, means;
    final double intercept;
    final Tree[] trees;
    final double[] treeWeights;
    final boolean boosted;

    /** One tree, flattened: node i is a leaf when feature[i] < 0. */
    static final class Tree {
        int[] feature, left, right;
        double[] threshold, value, mass;

        int leaf(double[] x) {
            int i = 0;
            while (feature[i] >= 0) i = x[feature[i]] <= threshold[i] ? left[i] : right[i];
            return i;
        }
    }

    private ModelScore(JsonNode j) {
        if (j.path("format").asInt() != FORMAT) {
            throw new IllegalArgumentException("model.json format " + j.path("format") + ", this reader knows " + FORMAT);
        }
        kind = j.path("kind").asText();
        features = strings(j.get("features"));
        JsonNode lr = j.get("logistic");
        if (lr != null) {
            coefficients = doubles(lr.get("coefficients"));
            intercept = lr.get("intercept").asDouble();
            // null: a version saved before its training means were kept; its explanation is coefficient x value
            means = lr.hasNonNull("means") ? doubles(lr.get("means")) : null;
            trees = null; treeWeights = null; boosted = false;
        } else {
            coefficients = null; means = null; intercept = 0.0;
            String combine = j.get("combine").asText();
            boosted = combine.equals("logistic-of-weighted-sum");
            if (!boosted && !combine.equals("mean-of-class-shares")) {
                throw new IllegalArgumentException("unknown tree combination " + combine);
            }
            treeWeights = doubles(j.get("tree_weights"));
            JsonNode ts = j.get("trees");
            trees = new Tree[ts.size()];
            for (int k = 0; k < trees.length; k++) {
                JsonNode t = ts.get(k);
                Tree tree = new Tree();
                tree.feature = ints(t.get("feature"));
                tree.threshold = doubles(t.get("threshold"));
                tree.left = ints(t.get("left"));
                tree.right = ints(t.get("right"));
                tree.value = doubles(t.get("value"));
                tree.mass = t.has("mass") ? doubles(t.get("mass")) : null;
                trees[k] = tree;
            }
        }
    }

    public static ModelScore parse(String json) {
        try {
            return new ModelScore(new ObjectMapper().readTree(json));
        } catch (IOException e) {
            throw new IllegalArgumentException("model.json is not JSON: " + e.getMessage(), e);
        }
    }

    private static final Map<String, ModelScore> LOADED = new ConcurrentHashMap<>();

    /** The model at `path` (a model.json: a local path, or a URI such as hdfs://), read once per JVM. */
    public static ModelScore load(String path) {
        return LOADED.computeIfAbsent(path, p -> {
            try {
                String text = text(p);
                if (text == null) {
                    throw new IOException("no such file");
                }
                return parse(text);
            } catch (IOException e) {
                throw new IllegalStateException("cannot read the model " + p + ": " + e, e);
            }
        });
    }

    /**
     * The text of a small file, null when it does not exist: a local path read directly, a URI
     * (hdfs://, where the models live with CLUSTER=1) through Hadoop's FileSystem, so executors on
     * other machines read the same file the trainer wrote.
     */
    public static String text(String path) throws IOException {
        if (!path.contains("://")) {
            java.nio.file.Path local = Paths.get(path);
            return Files.exists(local) ? new String(Files.readAllBytes(local), java.nio.charset.StandardCharsets.UTF_8) : null;
        }
        org.apache.hadoop.fs.Path remote = new org.apache.hadoop.fs.Path(path);
        org.apache.hadoop.fs.FileSystem fs = remote.getFileSystem(new org.apache.hadoop.conf.Configuration());
        if (!fs.exists(remote)) {
            return null;
        }
        try (java.io.InputStream in = fs.open(remote)) {
            return new String(in.readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        }
    }

    public String[] features() { return features.clone(); }

    /** MLlib's probability of the fraud class for the features in order. */
    public double probability(double[] x) {
        if (coefficients != null) {
            double margin = intercept;
            for (int i = 0; i < x.length; i++) margin += x[i] * coefficients[i];
            return 1.0 / (1.0 + Math.exp(-margin));
        }
        if (boosted) {   // GBTClassificationModel: margin = sum w * tree; LogLoss: 1 / (1 + e^(-2 margin))
            double margin = 0.0;
            for (int k = 0; k < trees.length; k++) margin += trees[k].value[trees[k].leaf(x)] * treeWeights[k];
            return 1.0 / (1.0 + Math.exp(-2.0 * margin));
        }
        // RandomForestClassificationModel: each tree votes its leaf's class shares, normalized at the end
        double fraud = 0.0, all = 0.0;
        for (Tree t : trees) {
            int leaf = t.leaf(x);
            fraud += t.value[leaf] * t.mass[leaf];
            all += t.mass[leaf];
        }
        return all == 0.0 ? 0.0 : fraud / all;
    }

    /**
     * Each feature's contribution to the score: for a logistic regression coefficient x (value -
     * mean), in log-odds; for trees the Saabas path attribution, in the forest's probability (its
     * mean of the trees' class shares) or the boosted margin.
     */
    public double[] contributions(double[] x) {
        double[] out = new double[features.length];
        if (coefficients != null) {
            for (int i = 0; i < out.length; i++) out[i] = coefficients[i] * (x[i] - (means == null ? 0.0 : means[i]));
            return out;
        }
        double scale = boosted ? 0.0 : trees.length;
        for (int k = 0; k < trees.length; k++) {
            Tree t = trees[k];
            double w = boosted ? treeWeights[k] : 1.0 / scale;
            int i = 0;
            while (t.feature[i] >= 0) {
                int next = x[t.feature[i]] <= t.threshold[i] ? t.left[i] : t.right[i];
                out[t.feature[i]] += w * (t.value[next] - t.value[i]);
                i = next;
            }
        }
        return out;
    }

    /** The largest contributions as models.explanation's JSON: [{feature, value, share}]. */
    public String explanation(double[] x, int top) {
        double[] c = contributions(x);
        double total = 0.0;
        Integer[] order = new Integer[c.length];
        for (int i = 0; i < c.length; i++) {
            order[i] = i;
            total += Math.abs(c[i]);
        }
        // as Spark's sort_array of (|c|, name) descending: the larger weight first, then the later name
        Arrays.sort(order, (a, b) -> {
            int byWeight = Double.compare(Math.abs(c[b]), Math.abs(c[a]));
            return byWeight != 0 ? byWeight : features[b].compareTo(features[a]);
        });
        StringBuilder b = new StringBuilder("[");
        for (int r = 0; r < Math.min(top, c.length); r++) {
            int i = order[r];
            if (r > 0) b.append(',');
            b.append("{\"feature\":\"").append(features[i]).append("\",\"value\":").append(round4(x[i]))
             .append(",\"share\":").append(round4(total > 0 ? Math.abs(c[i]) / total : 0.0)).append('}');
        }
        return b.append(']').toString();
    }

    static String round4(double v) {
        if (Double.isNaN(v) || Double.isInfinite(v)) return "null";
        return Double.toString(new BigDecimal(v).setScale(4, RoundingMode.HALF_UP).doubleValue());
    }

    // ------------------------------------------------------------------ export (train.py calls it)

    /**
     * The scoring part of a fitted MLlib classifier as JSON (train.py adds the features, the means
     * and the format): {"logistic": {...}} or {"trees": [...], "tree_weights": [...], "combine": ...}.
     */
    public static String export(Object model) {
        StringBuilder b = new StringBuilder("{");
        if (model instanceof LogisticRegressionModel) {
            LogisticRegressionModel lr = (LogisticRegressionModel) model;
            if (lr.numClasses() != 2) throw new IllegalArgumentException("only a binary logistic regression is exported");
            b.append("\"logistic\":{\"coefficients\":").append(array(lr.coefficients().toArray()))
             .append(",\"intercept\":").append(num(lr.intercept())).append('}');
        } else if (model instanceof RandomForestClassificationModel) {
            RandomForestClassificationModel rf = (RandomForestClassificationModel) model;
            List<Node> roots = new ArrayList<>();
            for (var t : rf.trees()) roots.add(t.rootNode());
            b.append("\"combine\":\"mean-of-class-shares\",\"tree_weights\":").append(array(rf.treeWeights()))
             .append(",\"trees\":").append(trees(roots, true));
        } else if (model instanceof GBTClassificationModel) {
            GBTClassificationModel gbt = (GBTClassificationModel) model;
            List<Node> roots = new ArrayList<>();
            for (var t : gbt.trees()) roots.add(t.rootNode());
            b.append("\"combine\":\"logistic-of-weighted-sum\",\"tree_weights\":").append(array(gbt.treeWeights()))
             .append(",\"trees\":").append(trees(roots, false));
        } else {
            throw new IllegalArgumentException("cannot export a " + model.getClass().getName());
        }
        return b.append('}').toString();
    }

    private static String trees(List<Node> roots, boolean classShares) {
        StringBuilder b = new StringBuilder("[");
        for (int k = 0; k < roots.size(); k++) {
            List<Node> nodes = new ArrayList<>();
            nodes.add(roots.get(k));
            int n = 0;
            List<int[]> children = new ArrayList<>();
            while (n < nodes.size()) {   // breadth first: a node's index is its place in `nodes`
                Node node = nodes.get(n++);
                if (node instanceof InternalNode) {
                    InternalNode in = (InternalNode) node;
                    nodes.add(in.leftChild());
                    nodes.add(in.rightChild());
                    children.add(new int[] {nodes.size() - 2, nodes.size() - 1});
                } else {
                    children.add(new int[] {-1, -1});
                }
            }
            int size = nodes.size();
            int[] feature = new int[size], left = new int[size], right = new int[size];
            double[] threshold = new double[size], value = new double[size], mass = new double[size];
            for (int i = 0; i < size; i++) {
                Node node = nodes.get(i);
                left[i] = children.get(i)[0];
                right[i] = children.get(i)[1];
                feature[i] = -1;
                if (node instanceof InternalNode) {
                    if (!(((InternalNode) node).split() instanceof ContinuousSplit)) {
                        throw new IllegalArgumentException("a categorical split cannot be exported (the features are continuous)");
                    }
                    ContinuousSplit s = (ContinuousSplit) ((InternalNode) node).split();
                    feature[i] = s.featureIndex();
                    threshold[i] = s.threshold();
                }
                if (classShares) {   // the node's training class counts, as the forest's vote normalizes them
                    double[] stats = node.impurityStats().stats();
                    double total = 0.0;
                    for (double v : stats) total += v;
                    value[i] = total == 0.0 || stats.length < 2 ? 0.0 : stats[1] / total;
                    mass[i] = total == 0.0 ? 0.0 : 1.0;
                } else {
                    value[i] = node.prediction();
                }
            }
            if (k > 0) b.append(',');
            b.append("{\"feature\":").append(Arrays.toString(feature).replace(" ", ""))
             .append(",\"threshold\":").append(array(threshold))
             .append(",\"left\":").append(Arrays.toString(left).replace(" ", ""))
             .append(",\"right\":").append(Arrays.toString(right).replace(" ", ""))
             .append(",\"value\":").append(array(value));
            if (classShares) b.append(",\"mass\":").append(array(mass));
            b.append('}');
        }
        return b.append(']').toString();
    }

    private static String num(double v) {
        if (Double.isNaN(v) || Double.isInfinite(v)) throw new IllegalArgumentException("a model parameter is " + v);
        return Double.toString(v);
    }

    private static String array(double[] v) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < v.length; i++) {
            if (i > 0) b.append(',');
            b.append(num(v[i]));
        }
        return b.append(']').toString();
    }

    private static String[] strings(JsonNode a) {
        String[] out = new String[a.size()];
        for (int i = 0; i < out.length; i++) out[i] = a.get(i).asText();
        return out;
    }

    private static double[] doubles(JsonNode a) {
        double[] out = new double[a.size()];
        for (int i = 0; i < out.length; i++) out[i] = a.get(i).asDouble();
        return out;
    }

    private static int[] ints(JsonNode a) {
        int[] out = new int[a.size()];
        for (int i = 0; i < out.length; i++) out[i] = a.get(i).asInt();
        return out;
    }

    // ------------------------------------------------------------------ the stateful path's verdict

    /** What {@link #verdict} gives each row: the probability and the top three contributions' JSON. */
    public static final StructType VERDICT = new StructType()
            .add("score", DataTypes.DoubleType, false)
            .add("explanation", DataTypes.StringType, false);

    /**
     * The model at `path` (a model.json) as one Spark column over the frame's columns named by its
     * features (cast to double; null is missing, NaN, as MLlib's assembler with handleInvalid=keep):
     * struct&lt;score, explanation&gt;, the same {@link #probability} and {@link #explanation} the
     * real-time path gives. The fraud job's plan used MLlib's transform (an assembled vector, the
     * trees walked per tree object) and a reflect call with the values as text for the explanation;
     * this is one JVM function per row and its closure carries only the path (each JVM reads the
     * file once), so a micro-batch's tasks do not carry the ensemble. Read here once on the driver,
     * so an unreadable model.json fails where the plan is built, not in every batch.
     */
    public static Column verdict(String path) {
        ModelScore model = load(path);
        Column[] values = new Column[model.features.length];
        for (int i = 0; i < values.length; i++) values[i] = functions.col(model.features[i]).cast(DataTypes.DoubleType);
        final int n = values.length;
        UDF1<Row, Row> decide = row -> {
            ModelScore m = load(path);
            double[] x = new double[n];
            for (int i = 0; i < n; i++) x[i] = row.isNullAt(i) ? Double.NaN : row.getDouble(i);
            return RowFactory.create(m.probability(x), m.explanation(x, 3));
        };
        return functions.udf(decide, VERDICT).apply(functions.struct(values));
    }

    // ------------------------------------------------------------------ SQL (reflect) entry points

    /** The probability for the features given as text ("v1,v2,..."; empty: missing): for tests
     * and for Spark SQL's reflect, which passes only strings and primitives. */
    public static double score(String path, String values) {
        return load(path).probability(parseValues(values, load(path).features.length));
    }

    /** The top three contributions' JSON for the features given as text (see score). */
    public static String explain(String path, String values) {
        ModelScore m = load(path);
        return m.explanation(parseValues(values, m.features.length), 3);
    }

    static double[] parseValues(String text, int n) {
        String[] parts = text.split(",", -1);
        if (parts.length != n) throw new IllegalArgumentException("expected " + n + " feature values, got " + parts.length);
        double[] x = new double[n];
        for (int i = 0; i < n; i++) x[i] = parts[i].isEmpty() ? Double.NaN : Double.parseDouble(parts[i]);
        return x;
    }
}

"""The sentences the pages show, built from what the data modules measured (pure: no Streamlit, no
store). Every figure goes through `dashboard.fmt`; nothing here infers what was not measured."""
from __future__ import annotations

from controlplane.faults import CATALOGUE, target
from dashboard import fmt
from pipelines.engine.stages import STAGES
from pipelines.guarantees import POLICIES, RT_POLICIES

COLORS = {"at-most-once": "red", "at-least-once": "orange", "exactly-once": "green"}


def badge(guarantee: str) -> str:
    return f":{COLORS.get(guarantee, 'gray')}-badge[{guarantee}]"


def _n(value) -> int:
    return 0 if fmt._missing(value) else int(value)


# --- guarantees -----------------------------------------------------------------------------------

def behind(lag_records, lag_seconds) -> str:
    """Lag in words: "behind 200 records (1.4 s)", or "caught up"; never called lost."""
    if _n(lag_records) <= 0:
        return "caught up with its input"
    return f"behind {fmt.count(lag_records)} records ({fmt.duration_s(lag_seconds)})"


def duplicates(duplicated, replayed, upstream) -> str:
    return (f"duplicated {fmt.count(duplicated)} ({fmt.count(replayed)} replayed, "
            f"{fmt.count(upstream)} upstream)")


def audit_badges(row: dict) -> str:
    """One line of badges for an audit row: lost only when above 0, duplicates split by cause, lag apart."""
    lost, dup = _n(row.get("lost")), _n(row.get("duplicated"))
    out = []
    if lost > 0:
        out.append(f":red-badge[lost {fmt.count(lost)}]")
    if dup > 0:
        out.append(f":orange-badge[{duplicates(dup, row.get('replayed'), row.get('upstream'))}]")
    if lost == 0 and dup == 0:
        out.append(":green-badge[lost 0 · duplicated 0]")
    lag = behind(row.get("lag_records"), row.get("lag_seconds"))
    out.append(f":gray-badge[{lag}]" if _n(row.get("lag_records")) > 0 else f":blue-badge[{lag}]")
    return " ".join(out)


def versus_truth(observed, truth) -> str:
    """The metric card's second line: "= truth 10,000" or "of truth 10,000"."""
    if fmt._missing(truth):
        return "no truth measured yet"
    return f"{'=' if _n(observed) == _n(truth) else 'of'} truth {fmt.count(truth)}"


def _evidence(guarantee: str, e: dict) -> str:
    kind = e["kind"]
    if kind == "dropped":
        return (f"dropped batch {e['batch_id']} ({fmt.count(e['processed'])} records, never retried)"
                + (f": {e['reason']}" if e.get("reason") else ""))
    if kind == "applied-twice":
        times = " and ".join(fmt.clock(t) for t in e["times"])
        return (f"applied batch {e['batch_id']} {'twice' if e['count'] == 2 else str(e['count']) + ' times'} "
                f"({times}): the replay counted its {fmt.count(e['processed'])} records again")
    if kind == "skipped":
        return (f"skipped the replay of batch {e['batch_id']} at {fmt.clock(e['until'])} "
                f"(applied at {fmt.clock(e['applied_at'])}): counted once")
    if kind == "new-checkpoint":
        policy = POLICIES.get(guarantee)
        why = (f" — it keeps no checkpoint across restarts and starts from the {policy.starting_offsets} offsets, "
               "so what came while it was down was never read") if policy and not policy.keeps_checkpoint else ""
        return (f"started a new checkpoint ({fmt.short_id(e['old'])} → {fmt.short_id(e['new'])}) "
                f"between {fmt.clock(e['at'])} and {fmt.clock(e['until'])}{why}")
    return kind


def _recovery_of(command: dict, recoveries: list[dict]) -> dict | None:
    """The supervisor's recovery record of a command (same fault, killed while it ran)."""
    return next((r for r in recoveries if r["fault"] == command["fault"] and r["job"] == command["job"]
                 and command["at"] - 1000 <= r["at"] <= command["until"] + 1000), None)


def causes(found: list[dict]) -> list[str]:
    """The faults and restarts behind a change, in words, oldest first; a recovery the supervisor
    measured for a command is said with that command."""
    recoveries = [c for c in found if c["kind"] == "recovery"]
    told, out = set(), []
    for c in found:
        if c["kind"] == "command":
            text = f"{c['fault']} #{c['id']} on {target(c['fault'], c['job'])} at {fmt.clock(c['at'])}"
            if c.get("status") not in (None, "done"):
                text += f" ({c['status']})"
            rec = _recovery_of(c, recoveries)
            if rec:
                told.add(id(rec))
                text += f" (batches again {fmt.duration_s(rec['seconds'])} after the kill{_how(rec)})"
            out.append(text)
        elif c["kind"] == "start":
            out.append(f"{c['job']} restarted at {fmt.clock(c['at'])}")
    out += [f"{r['job']} {'exited' if r['fault'] == 'exit' else 'killed by ' + r['fault']} at {fmt.clock(r['at'])}, batches again "
            f"{fmt.duration_s(r['seconds'])} later{_how(r)}" for r in recoveries if id(r) not in told]
    return out


def _how(recovery: dict) -> str:
    return ", its warm standby took over" if recovery.get("via") == "standby" else ""


def change(ch: dict) -> str:
    """One change of a guarantee, in words: what moved, the ledger's evidence, and the faults and
    restarts overlapping it — or "no fault recorded" when nothing measured explains it."""
    moved = [f"{name} {fmt.signed(ch[name])}" for name in ("lost", "replayed", "upstream") if ch.get(name)]
    head = f"**{fmt.clock(ch['ts'])}** " + (", ".join(moved) if moved else "no change in lost or duplicated")
    said = [_evidence(ch["guarantee"], e) for e in ch["evidence"]]
    if ch.get("upstream", 0) > 0:
        said.append("one txn_id came twice in the input topic (upstream of the query)")
    found = causes(ch["causes"])
    only_upstream = not ch["evidence"] and not ch.get("lost") and not ch.get("replayed") and ch.get("upstream", 0) > 0
    if found:
        tail = f"; after {', '.join(found)}"
    else:
        tail = "" if only_upstream else " — no fault recorded"
    return head + (": " + "; ".join(said) if said else "") + tail + "."


def quiet(row: dict | None) -> str:
    """What a guarantee's story says when nothing changed."""
    if not row:
        return "no audit yet: nothing compared with the truth so far."
    return (f"no loss or duplicate in this time; {fmt.count(row.get('observed'))} counted "
            f"{versus_truth(row.get('observed'), row.get('truth'))}, {behind(row.get('lag_records'), row.get('lag_seconds'))}.")


# --- commands, checkpoints ------------------------------------------------------------------------

def params(kind: str, values: dict) -> str:
    """A command's parameters with their units from the catalogue: "seconds 10 s, count 200 events"."""
    fault = CATALOGUE.get(kind)
    units = {p.name: p.unit for p in fault.params} if fault else {}
    out = []
    for name, value in (values or {}).items():
        unit = units.get(name, "")
        shown = fmt.decimal(value, 3) if isinstance(value, (int, float)) else str(value)
        out.append(f"{name} {shown}" + (f" {unit}" if unit and unit != "share" else ""))
    return ", ".join(out)


def checkpoint_state(row: dict, running: bool) -> str:
    """Where one checkpoint stands, from Spark's logs."""
    committed = row.get("committed_batch")
    head = ("no batch committed yet" if fmt._missing(committed)
            else f"batch {int(committed)} committed")
    if not row.get("uncommitted"):
        return head
    planned = int(row["planned_batch"])
    ago = row.get("planned_s_ago")
    when = "" if fmt._missing(ago) else f" {fmt.duration_s(ago)} ago"
    if running:
        return f"{head}; batch {planned} planned{when}, running (not committed yet)"
    return f"{head}; batch {planned} planned{when} and not committed: the next run replays it with the same offsets"


def fraud_job(q: dict) -> str:
    """The fraud job's own audit in one sentence (its sink is exactly once: store and topic)."""
    parts = [f"decided {fmt.count(q['decided'])} of truth {fmt.count(q['truth'])} in the store"]
    parts.append(f"lost {fmt.count(q['lost'])}" if _n(q.get("lost")) > 0 else "lost 0")
    if q.get("topic") is not None:
        extra = _n(q.get("topic_duplicated"))
        parts.append(f"{fmt.count(q['topic'])} distinct in the decisions topic"
                     + (f", {fmt.count(extra)} extra records" if extra else ", no extra record"))
    parts.append(behind(q.get("lag_records"), q.get("lag_seconds")))
    return "Fraud job (its own exactly-once sinks): " + ", ".join(parts) + "."


# --- fraud: the real-time path's guarantee --------------------------------------------------------

_RESTARTS = {"crash": "restart after the crash", "zombie": "takeover from the frozen instance",
             "set-fraud-guarantee": "restart that changed the guarantee"}


def rt_guarantee_story(gap: dict | None, totals: dict, guarantee: str | None, minutes: float = 30) -> str:
    """What the chosen real-time guarantee just did, from the auditor's measured figures: the newest
    kill or restart of the fraud job (`gap`, a fraud_rt_gaps row) or, without one, the quiet span."""
    rt = totals.get("real-time")
    if gap is None:
        if rt is None:
            return ("The real-time path has decided nothing in the last "
                    f"{minutes:g} minutes: the fraud job runs in micro-batch mode (FRAUD_MODE=realtime runs "
                    "the real-time path beside the stateful one).")
        said = (f"No kill or restart hit the fraud job in the last {minutes:g} minutes: the real-time path"
                + (f" ({guarantee})" if guarantee else "") + f" decided {fmt.count(rt['decided'])} transactions")
        return said + (f", {fmt.count(rt['undecided'])} undecided." if rt["undecided"] else " and left none undecided.")
    g = gap.get("guarantee") or guarantee or "the real-time path"
    policy = RT_POLICIES.get(g)  # None: a run that did not record its guarantee
    restart = _RESTARTS.get(gap.get("kind"), "restart")
    undecided, filled = _n(gap.get("undecided")), _n(gap.get("filled_by_accurate"))
    if fmt._missing(gap.get("recovered_at")):
        return (f"{g}: since the {gap.get('kind')} at {fmt.clock(gap.get('killed_at'))} the real-time path has "
                f"decided nothing yet; {fmt.count(undecided)} transactions undecided so far.")
    down = fmt.duration_ms(gap.get("down_ms"))
    if policy is not None and not policy.resends:
        head = (f"{g} skipped {fmt.count(undecided)} transactions during the {down} {restart}"
                if undecided else f"{g} skipped nothing during the {down} {restart}")
    else:
        head = (f"{g} replayed {fmt.count(gap.get('replayed'))} decisions after the {down} {restart}"
                + (f" and left {fmt.count(undecided)} undecided" if undecided else ", leaving none undecided"))
    if undecided:
        when = fmt.duration_ms(gap.get("accurate_max_ms"))
        tail = (f"the accurate path decided all of them, at most {when} after they arrived" if filled == undecided
                else f"the accurate path has decided {fmt.count(filled)} of them so far"
                + (f" (at most {when} after they arrived)" if filled else ""))
        head += "; " + tail
    return head + f"; p99 in the minute after recovery {fmt.duration_ms(gap.get('p99_after_recovery_ms'))}."


def confirmed_alerts(alerts, confirmed, minutes: float = 30) -> str:
    """How many of the real-time path's fraud alerts the stateful path confirmed (auditor's counts)."""
    if alerts is None:
        return "Fast alerts confirmed: not known yet (the auditor has not compared both paths' fraud flags)."
    if alerts == 0:
        return (f"Fast alerts confirmed: no fraud alert of the real-time path in the last {minutes:g} minutes "
                "has been decided by the stateful path yet.")
    return (f"Fast alerts confirmed: of the {fmt.count(alerts)} transactions the real-time path flagged in the last "
            f"{minutes:g} minutes and the stateful path has decided, the stateful path flagged "
            f"{fmt.count(confirmed)} ({fmt.percent(confirmed / alerts)}).")


def poison_batches(q, threshold: int) -> str:
    """What the poison-batch rule did, in one sentence over the quarantines shown."""
    done = q[q["status"] == "dead-lettered"]
    pending = q[q["status"] == "pending"]
    unexplained = q[q["status"] == "not reproduced"]
    parts = [f"A batch that fails {threshold} times in a row the same way on the same offsets is poison: its "
             f"records that fail on their own go to the dead-letter topic with the exception as reason, and "
             f"the query restarts without them"]
    if len(done):
        parts.append(f"{int(done['dead_lettered'].sum()):,} record(s) of {len(done):,} batch(es) dead-lettered")
    if len(pending):
        parts.append(f"{len(pending):,} waiting for their dead-letter send (retried at the next failure)")
    if len(unexplained):
        parts.append(f"{len(unexplained):,} failed with no record failing alone: nothing dead-lettered, "
                     f"the restart policy goes on")
    return "; ".join(parts) + "."


# --- overview -------------------------------------------------------------------------------------

def starting(row: dict) -> str:
    """What a Spark job is doing while it starts (from dashboard.data.overview.startup)."""
    job = row["job"]
    if row["phase"] == "session":
        return (f"**{job} job starting** (Spark session starting, no batch yet): process pid {row['pid']} up "
                f"{fmt.duration_s(row['up_s'])}; the JVM and the SparkSession come up before it takes its lease "
                "and starts its queries.")
    return (f"**{job} job starting** (Spark session up, no batch yet): queries started "
            f"{fmt.duration_s(row['queries_s'])} ago under lease epoch {row['epoch']}; its first batch reads "
            "the backlog from Kafka and loads its state before any result appears.")


def warmup(start: dict, left_out: int) -> str:
    """The tiles' rule on the warm-up, said on the page."""
    return (f"Warm-up left out: {fmt.count(left_out)} decision{'s' if left_out != 1 else ''} of transactions "
            f"that reached Kafka before the fraud job's first batch of its current instance started "
            f"({fmt.clock(start['batch_started'])}, batch {start['batch_id']}, lease epoch {start['epoch']}): "
            "they waited for the job to start, not for a decision. They are shaded on the latency chart and "
            "not in the tiles or the histogram; a restart's wait is its recovery time on the timeline.")


# --- checkpoints ----------------------------------------------------------------------------------

def query_health(part) -> str:
    """What the per-query panels show over their batches, said in words (empty panels explained)."""
    if part.empty:
        return "No batch of this query in the last 15 minutes."
    n = len(part)
    behind = int((part["processed_rows_per_s"] < part["input_rows_per_s"]).sum())
    gap = part["watermark_gap_s"].dropna()
    removed = part["state_rows_removed"].fillna(0).sum()
    late = part["state_rows_dropped_late"].fillna(0).sum()
    parts = [f"Over its newest {fmt.count(n)} batches: {fmt.count(behind)} processed slower than their input came "
             "in (backpressure: the query falls behind while that lasts)"]
    parts.append(f"the watermark trails the newest event by {fmt.duration_s(gap.iloc[-1])} now (its configured "
                 "delay plus how far the newest event runs ahead)" if not gap.empty else
                 "no watermark gap: this query has no event-time watermark, so Spark reports none")
    parts.append(f"{fmt.count(removed)} state rows removed and {fmt.count(late)} rows dropped late"
                 + (" — none evicted yet: no state row outlived its watermark or TTL in these batches"
                    if removed == 0 else ""))
    parts.append(f"median commit {fmt.duration_ms(part['commit_ms'].median())}")
    return "; ".join(parts) + "."


def stages(split) -> str:
    """The stage breakdown's medians in words: which part takes the time of a fraud batch."""
    med = {col: split[col].median() for col, _ in STAGES}
    total = split["duration_ms"].median()
    top = sorted(STAGES, key=lambda c: -med[c[0]])[:3]
    said = ", ".join(f"{name} {fmt.duration_ms(med[col])}" for col, name in top)
    return (f"Median of the newest {fmt.count(len(split))} fraud batches with rows: {fmt.duration_ms(total)} "
            f"a batch, most of it {said}. The Spark job's part (read, parse, state, aggregate) is one job: Spark "
            f"does not time its operators apart. From the progress listener and the decisions sink's own laps.")


# --- memory and disk ------------------------------------------------------------------------------

def memory(summary, every_s: float) -> str:
    """The newest memory sample in words, and the role that changed most over the span drawn."""
    if summary.empty:
        return "No memory sample yet."
    newest = summary.loc[summary["ts"].idxmax()]
    parts = [f"Newest sample at {fmt.clock(newest['ts'])} (one every {fmt.duration_s(every_s)}): "
             f"{fmt.count(len(summary))} processes, {fmt.decimal(summary['rss_mb'].sum(), unit='MB')} resident together"]
    top = summary.iloc[0]
    if not fmt._missing(top["change_pct"]):
        parts.append(f"the largest change since the first sample shown: {top['process']} "
                     f"{'+' if top['change_pct'] >= 0 else '−'}{fmt.decimal(abs(top['change_pct']))} % "
                     f"({fmt.decimal(top['first_mb'])} → {fmt.decimal(top['rss_mb'], unit='MB')})")
    moved = summary[summary["pids"] > 1]
    if not moved.empty:
        parts.append("a name is a role: " + ", ".join(f"{r.process} was {fmt.count(r.pids)} processes"
                                                      for r in moved.itertuples())
                     + " in this span (restarts, takeovers), so its line jumps where a new process took over")
    return "; ".join(parts) + "."


def storage(latest, retention, hours: float) -> str:
    """The newest bytes on disk, and what the store's retention deleted."""
    names = {"store": "store", "checkpoints": "checkpoints", "kafka": "broker data"}
    out = ", ".join(f"{names.get(r.what, r.what)} {fmt.size_bytes(r.bytes)}" for r in latest.itertuples())
    out = (f"Now on disk: {out}." if out else "")
    if hours <= 0:
        return out + " The store keeps every row (STORE_RETENTION_HOURS is 0)."
    if retention is None or retention.empty:
        return out + (f" The store's retention deletes rows older than {fmt.decimal(hours)} h from the tables that "
                      "grow with time; no pass has run yet.")
    last = retention["ran_at"].max()
    return out + (f" The store's retention deletes rows older than {fmt.decimal(hours)} h from the tables that grow "
                  f"with time (the sink ledger down to the batches a restart can consult): the last pass at {fmt.clock(last)} deleted "
                  f"{fmt.count(retention['deleted'].sum())} rows, {fmt.count(retention['deleted_total'].sum())} "
                  "since the store was created.")


# --- fraud: the headline quality, and the model page ----------------------------------------------

# the fraud-detection handbook's best published figures on its baseline protocol (docs/fraud.md)
HANDBOOK_BEST = "tuned XGBoost: AUC ROC 0.872, average precision 0.687, card precision@100 0.303"
NO_HANDBOOK_RUN = ("No handbook run yet: the detector's quality on data it was not tuned on comes from "
                   "`python -m bench handbook --json` (the fraud-detection handbook's public dataset replayed through "
                   "the real fraud job, scored on a test week after a 7-day feedback delay; it records its figures "
                   "here).")
LIVE_IS_A_CHECK = ("These live figures are a consistency check, not the detector's quality: the simulator's "
                   "frauds are shaped from the analyzers' limits (`simulator/patterns.py`), so the rules catch nearly "
                   "all of them by construction. Precision and recall come from the auditor, against the simulator's "
                   "labels.")
NO_MODEL = ("No learned model yet: the rules decide (model 0). Train one with "
            "`python -m pipelines.fraud.train --from DATE --to DATE`.")


def handbook_run(run: dict, rows) -> str:
    """What the newest `bench handbook` run measured on, in one sentence."""
    p = run.get("protocol") or {}
    test = rows["test_transactions"].max() if len(rows) else None
    frauds = rows["test_frauds"].max() if len(rows) else None
    return (f"`bench handbook` on {run['when']}: the fraud-detection handbook's public dataset replayed through the "
            f"real fraud job; trained on {p.get('train', '—')}, a {p.get('delay_days', '—')}-day feedback delay, "
            f"tested on {p.get('test', '—')} ({fmt.count(test)} payments, {fmt.count(frauds)} frauds, cards "
            f"already known compromised left out each day): days no aggregator shown here was tuned on. "
            f"The handbook's best published on this protocol, {HANDBOOK_BEST}.")


def evaluation_run(run: dict) -> str:
    return (f"`bench quality` on {run['when']}: the project's own evaluation set (seed {run['seed']}, "
            f"{fmt.count(run['transactions'])} fraudulent transactions, threshold {fmt.decimal(run['threshold'], 2)}), "
            "drawn by rules the analyzers were not tuned on; every fraud pattern together against every legitimate "
            "transaction. Per pattern: below, under Measured by the benches.")


def model_in_use(use: dict | None, newest: int | None) -> str:
    """Which aggregator the fraud job decides with, since when, and whether a newer one waits."""
    if use is None:
        return ("The fraud job has not said which aggregator it decides with yet (it records it when it starts: "
                "`model_use`).")
    head = ("The fraud job decides with the rules (model 0)" if use["version"] == 0
            else f"The fraud job decides with model {use['version']}")
    head += f" since {fmt.clock(use['since'])} UTC (lease epoch {use['epoch']})."
    chosen = use.get("chosen")
    if chosen is not None:
        head += (f" A use-model chose {'the rules' if chosen == 0 else f'model {chosen}'}: the job serves it again "
                 "after a restart or a standby's takeover, until another use-model.")
    if newest is not None and newest > use["version"] and not use.get("why"):
        when = ("it stays on the chosen version" if chosen is not None
                else "the job loads the newest at its start")
        head += (f" Model {newest} is newer: {when}, or switches between two batches "
                 f"on Controls → Use model (`python -m pipelines.control use-model --version {newest}`).")
    return head


def labelled_traffic(n_labels: int, decided: int, frauds: int, topic: str) -> str:
    return (f"The newest {fmt.count(n_labels)} labels in `{topic}` (the labels known so far, read from Kafka), "
            f"joined with the store's decisions: {fmt.count(decided)} decided, {fmt.count(frauds)} of them frauds. "
            "Each curve is the decisions one version made (the stateful path's, in the store; the real-time path's "
            "live only in `decisions-rt`). A threshold of the score is a point on the curve; the job's own "
            "threshold is one of them. The oldest day drawn is usually only partly labelled here: the newest "
            "labels begin within it. On the simulator's traffic (make demo's) these figures are a consistency "
            "check, not the detector's quality: the simulator shapes its frauds from the analyzers' limits. The "
            "quality on data it was not tuned on is `bench handbook`'s (the Fraud page), or these figures on a "
            "replayed history (`python -m simulator replay`).")


_FEATURE_WORDS = {"amount": "amount", "is_weekend": "weekend", "is_night": "night",
                  "score_avg_ticket": "average-ticket score", "score_proximity": "proximity score",
                  "score_velocity": "velocity score", "score": "the decision's score"}
_WINDOWED = {("c", "count"): "card's payments", ("c", "mean"): "card's mean amount",
             ("t", "count"): "terminal's payments", ("t", "risk"): "terminal risk"}


def feature(name: str) -> str:
    """A feature's name in words: t_risk_7d -> "terminal risk over 7 days"; unknown names as they are."""
    if name in _FEATURE_WORDS:
        return _FEATURE_WORDS[name]
    parts = name.split("_")
    if len(parts) == 3 and (parts[0], parts[1]) in _WINDOWED and parts[2].endswith("d") and parts[2][:-1].isdigit():
        days = int(parts[2][:-1])
        return f"{_WINDOWED[(parts[0], parts[1])]} over {days} day{'s' if days != 1 else ''}"
    return name


def reasons(explanation) -> str:
    """A decision's `explanation` (JSON: its three largest contributions) in words:
    "terminal risk over 7 days 0.42: 31 % · amount 212: 22 % · …"; "—" when it has none."""
    import json

    try:
        items = json.loads(explanation) if explanation else None
    except (TypeError, ValueError):
        items = None
    if not items:
        return fmt.NONE
    return " · ".join(f"{feature(str(i.get('feature')))} {fmt.decimal(i.get('value'), 2)}: "
                      f"{fmt.percent(i.get('share'), 0)}" for i in items if isinstance(i, dict))


def not_measured(model: dict | None) -> str:
    """What the Model page does not show, plainly."""
    parts = ["Each decision carries its three largest contributions (`explanation`): a logistic regression's "
             "coefficient × (value − training mean), which decomposes its log-odds exactly; a tree ensemble's path "
             "attribution (Saabas: each split's change of the node value credited to its feature, exact along the "
             "path); the rules' analyzer scores"]
    if model and not model.get("explain"):
        why = ("was saved without its coefficients (a version trained before they were kept)"
               if model.get("kind") == "logistic-regression" else f"is a {model['kind']}")
        parts.append(f"model {int(model['version'])} {why}, so its decisions carry no explanation: what its "
                     "features weigh is not measured here")
    parts.append("each event-time feature's separation of the labelled traffic on its own is not measured here "
                 "either: the features are in the Kafka feature log (`features`), not in the store")
    return "; ".join(parts) + "."


def rt_deciders(who: dict, topic: str) -> str:
    """Who made the newest real-time decisions, counted from them (dashboard.data.fraud.rt_deciders):
    "Of the newest 2,000 real-time decisions in `decisions-rt`: 1,850 by model 2, 150 by the rules
    (92.5 % by a model). Why the rules: 140 — terminal … has no features …; 10 — …"."""
    n = who["decisions"]
    parts = [f"{fmt.count(c)} by model {v}" for v, c in who["model"].items()]
    if who["rules"]:
        parts.append(f"{fmt.count(who['rules'])} by the rules")
    share = sum(who["model"].values()) / n if n else None
    out = (f"Of the newest {fmt.count(n)} real-time decisions in `{topic}`: {', '.join(parts)} "
           f"({fmt.percent(share)} by a learned model).")
    reasons = [f"{fmt.count(c)} — {kind}" if kind else f"{fmt.count(c)} — no model in use (the rules are model 0)"
               for kind, c in who["why"].items()]
    if reasons:
        out += " Why the rules decided: " + "; ".join(reasons) + "."
    return out

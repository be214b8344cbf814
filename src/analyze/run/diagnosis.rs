//! Why a series stops scaling: rules over its steps' evidence (throughput, CPU per request,
//! the busiest server thread, run-queue wait, context switches, Little's law, the USL fit)
//! that name the limit it hit at its knee, with the figures that support it, in the shared-memory hash-table study's
//! and 004's way of reasoning, and `undetermined`, with the figures that ruled each limit
//! out, when none fits. A diagnosis is never more confident than its evidence: without a
//! knee it is at most `low`.

use serde::{Deserialize, Serialize};

use super::peak::{clients_text, level_within_noise, levels_text, NOISE_FRACTION};
use super::{LittleRow, LoadPoint, SeriesAnalysis};
use crate::record::observed::{Observation, PerRequest};
use crate::record::steps::StepResult;

/// A cpuset at least this busy (percent) has no room left.
pub const BUSY_PCT: f64 = 90.0;
/// A thread at least this busy (percent of one CPU) is saturated.
pub const THREAD_BUSY_PCT: f64 = 90.0;
/// Neither side counts as busy below this (percent).
pub const IDLE_PCT: f64 = 60.0;
/// CPU or context switches per request that grow less than this (fraction) stay flat.
pub const FLAT_GROWTH: f64 = 0.25;
/// Run-queue wait per request must grow at least this many times from the first level.
pub const RUN_DELAY_GROWTH: f64 = 1.5;
/// Server threads waiting for a CPU on average, per CPU of its cpuset, for oversubscription:
/// one thread waiting all the time for each CPU.
pub const WAITING_PER_CPU: f64 = 1.0;
/// USL σ above this is "clearly above zero".
pub const SIGMA_CLEAR: f64 = 0.03;
/// Throughput below this fraction of the peak after it has fallen (the knee's definition of
/// a fall, so a series the coherency rule reads as falling always has a knee).
pub const RETROGRADE_FRACTION: f64 = crate::analyze::knee::FALL_FRACTION;

/// What a series ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The load generator (or the external tool) was saturated, or fewer requests were in
    /// flight than configured.
    Client,
    /// The server's CPUs were busy at a flat CPU per request.
    ServerCpu,
    /// One server thread was saturated while its cpuset had room.
    OneThread,
    /// CPU or blocking per request grew while throughput stopped growing.
    Contention,
    /// Throughput fell after its peak (USL κ > 0).
    Coherency,
    /// More runnable server threads than CPUs: run-queue wait per request grew.
    Oversubscription,
    /// The server holds a fixed number of requests at once: the rest wait unread in its
    /// sockets while its CPUs idle.
    Concurrency,
    /// The link carrying the traffic is near its capacity.
    Network,
    /// The server waits on its storage.
    Disk,
    /// Neither side busy, flat throughput, latency growing as Little's law predicts.
    Outside,
    /// A cgroup's CPU quota throttled the server (or its cgroup cpuset held fewer CPUs than
    /// its placement), and the server used what it allowed.
    Quota,
    /// Other processes took 10% or more of the server's or the client's CPUs, which had no
    /// room left.
    Neighbour,
    /// No rule fits.
    Undetermined,
}

/// How far the evidence goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// One figure, or no knee.
    Low,
    /// The deciding figure with a margin.
    Medium,
    /// The deciding figure with a margin and a second one agreeing.
    High,
}

/// One figure a diagnosis rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// What was measured (`busiest_thread_cpu_pct`, `server_cpu_pct`, ...).
    pub metric: Metric,
    /// Its value, in the metric's unit ([`Metric::unit`]); NaN (null in JSON) when it was
    /// not measured.
    #[serde(deserialize_with = "crate::record::load::nan_if_null")]
    pub value: f64,
    /// The load level (clients) it was measured at; None for a series-wide figure (USL).
    pub at_clients: Option<usize>,
    /// What it shows.
    pub note: String,
}

/// The diagnosis of one series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// Target name.
    pub target: String,
    /// Placement name.
    pub placement: String,
    /// Clients at the knee of throughput; None when the curve has no knee.
    pub knee_clients: Option<usize>,
    /// The limit it hit.
    pub limit: Limit,
    /// How far the evidence goes.
    pub confidence: Confidence,
    /// The figures it rests on (for `undetermined`, those that ruled each limit out); never
    /// empty.
    pub evidence: Vec<Evidence>,
    /// The diagnosis in one sentence, printed verbatim at the top of the reports; it ends
    /// with what to try next (`Next: ...`).
    pub sentence: String,
    /// What limits the confidence, printed beside the sentence: neighbours that took 10% of
    /// either side's CPUs, levels still noisy after their repetitions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Each resource the requests pass through at the level the rules read: its utilisation,
    /// saturation and errors, judged against the rules' thresholds (the reports' table).
    #[serde(default)]
    pub resources: Vec<ResourceRow>,
}

impl Limit {
    /// Every limit, in declaration order.
    pub const ALL: [Limit; 13] = [
        Limit::Client,
        Limit::ServerCpu,
        Limit::OneThread,
        Limit::Contention,
        Limit::Coherency,
        Limit::Oversubscription,
        Limit::Concurrency,
        Limit::Network,
        Limit::Disk,
        Limit::Outside,
        Limit::Quota,
        Limit::Neighbour,
        Limit::Undetermined,
    ];

    /// Its name in analysis.json and the reports (`one_thread`).
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Client => "client",
            Limit::ServerCpu => "server_cpu",
            Limit::OneThread => "one_thread",
            Limit::Contention => "contention",
            Limit::Coherency => "coherency",
            Limit::Oversubscription => "oversubscription",
            Limit::Concurrency => "concurrency",
            Limit::Network => "network",
            Limit::Disk => "disk",
            Limit::Outside => "outside",
            Limit::Quota => "quota",
            Limit::Neighbour => "neighbour",
            Limit::Undetermined => "undetermined",
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Confidence {
    /// Every confidence, lowest first.
    pub const ALL: [Confidence; 3] = [Confidence::Low, Confidence::Medium, Confidence::High];

    /// Its name in analysis.json and the reports (`high`).
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::Low => "low",
            Confidence::Medium => "medium",
            Confidence::High => "high",
        }
    }
}

impl std::fmt::Display for Confidence {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Diagnosis {
    /// The value of the last evidence entry of `metric` (a rule's own figure comes after
    /// the ones it repeats from another), None when the diagnosis does not quote it.
    pub fn figure(&self, metric: Metric) -> Option<f64> {
        self.evidence
            .iter()
            .rev()
            .find(|e| e.metric == metric)
            .map(|e| e.value)
    }
}

/// One load level's evidence, repetitions averaged.
#[derive(Debug, Clone, Default, PartialEq)]
struct Level {
    clients: usize,
    throughput_rps: f64,
    latency_us: Option<f64>,
    server_cpu_pct: Option<f64>,
    server_cpus: usize,
    client_saturated: bool,
    client_cpu_pct: Option<f64>,
    /// The built-in generator's busiest thread, % of one CPU.
    client_busiest_pct: Option<f64>,
    /// The built-in generator's threads' run-queue wait, % of the window.
    client_run_delay_pct: Option<f64>,
    cpu_us_per_req: Option<f64>,
    voluntary_cs_per_req: Option<f64>,
    run_delay_us_per_req: Option<f64>,
    run_delay_pct: Option<f64>,
    busiest: Option<(String, f64)>,
    /// The server's CPU (% of its cpuset) in the repetition the busiest thread comes from.
    busiest_cpuset_pct: Option<f64>,
    little_ratio: Option<f64>,
    inflight: Option<f64>,
    /// The throughput's coefficient of variation over the repetitions (fraction).
    throughput_cv: f64,
    /// The throughput varied 3% or more over 2 or more repetitions.
    noisy: bool,
    /// The quota, the cgroup cpuset and the neighbours.
    cpu: limits_cpu::CpuLevel,
    /// Sockets, link and disk (limits_io.rs).
    io: limits_io::IoLevel,
    /// The server threads' states (None when not sampled).
    states: Option<resources::StatesLevel>,
}

/// Diagnoses a series from its analysis and its ok steps.
pub fn diagnose(series: &SeriesAnalysis, steps: &[&StepResult]) -> Diagnosis {
    diagnose_with_profile(series, steps, None)
}

/// Diagnoses a series from its analysis, its ok steps and what its profile passes show.
pub fn diagnose_with_profile(
    series: &SeriesAnalysis,
    steps: &[&StepResult],
    profile: Option<&ProfileEvidence>,
) -> Diagnosis {
    let mut levels: Vec<Level> = series
        .points
        .iter()
        .map(|p| level(p, series, steps))
        .collect();
    let late = generator_saturated_late(&levels).map(|i| {
        let clients = levels[i].clients;
        levels.truncate(i);
        clients
    });
    let knee = series.knee.as_ref().and_then(|k| k.throughput_knee);
    let knee_index = knee
        .and_then(|k| series.points.iter().position(|p| load_of(p) >= k))
        .filter(|&i| i < levels.len())
        .or_else(|| flat_from_the_start(series, &levels));
    let name = format!("{}/{}", series.target, series.placement);
    if levels.is_empty() {
        return Diagnosis {
            target: series.target.clone(),
            placement: series.placement.clone(),
            knee_clients: None,
            limit: Limit::Undetermined,
            confidence: Confidence::Low,
            evidence: vec![Evidence {
                metric: Metric::OkSteps,
                value: 0.0,
                at_clients: None,
                note: "no step measured anything".into(),
            }],
            sentence: format!("{name}: no step measured anything, so nothing can be said. Next: check the steps' failures (report.md lists them) and run again."),
            notes: Vec::new(),
            resources: Vec::new(),
        };
    }
    // Without a knee (Kneedle reads only the rising part: a curve whose peak is its first
    // flat level shows none), the flat part starts at the saturation point, the first level
    // within 5% of the peak.
    let saturation_index = series.knee.as_ref().and_then(|k| {
        series
            .points
            .iter()
            .position(|p| load_of(p) >= k.saturation)
            .filter(|&i| i < levels.len())
    });
    let ctx = Ctx {
        levels: &levels,
        from: knee_index.or(saturation_index).unwrap_or(levels.len() - 1),
        series,
        profile,
    };
    // Without the server's figures only the client's side can be told: the server-side
    // rules would read absent figures as evidence.
    let unobserved = steps.iter().find_map(|s| s.server_not_observed());
    let rules = if unobserved.is_some() {
        &RULES[..1]
    } else {
        &RULES[..]
    };
    let found = rules.iter().find_map(|rule| rule(&ctx));
    let table = resources::table(&ctx);
    let knee_clients = knee_index.map(|i| levels[i].clients);
    let opening = opening(&name, series, &levels, knee_index);
    let (limit, mut confidence, mut evidence, because, next) = match found {
        Some(f) => (f.limit, f.confidence, f.evidence, f.because, f.next),
        None => match unobserved {
            Some(why) => not_observed(&ctx, why),
            None => (
                Limit::Undetermined,
                Confidence::Low,
                ruled_out(&ctx),
                resources::undetermined_because(&table),
                resources::next_when_undetermined(&ctx, &table),
            ),
        },
    };
    if knee_clients.is_none() {
        confidence = confidence.min(Confidence::Low);
    }
    let mut notes = limits_cpu::cap(&ctx, limit, &mut confidence, &mut evidence);
    notes.extend((0..levels.len()).find_map(|i| ctx.drifted(i)));
    notes.extend(late.map(|clients| {
        format!("the load generator saturated from {clients} clients, after the server's CPUs had filled: the diagnosis reads the levels before it")
    }));
    if confidence == Confidence::High {
        let split = reps::disagreements(&ctx, steps, limit, rules);
        if !split.is_empty() {
            confidence = Confidence::Medium;
            evidence.push(ev(
                Metric::RepetitionsDisagreeing,
                split.len() as f64,
                None,
                "repetitions whose own figures name another limit: no high confidence",
            ));
            notes.push(reps::note(limit, &split, reps::repetitions(steps).len()));
        }
    }
    if let Some(p) = profile {
        evidence.extend(p.evidence());
    }
    Diagnosis {
        target: series.target.clone(),
        placement: series.placement.clone(),
        knee_clients,
        limit,
        confidence,
        evidence,
        sentence: format!("{opening}: {because}. Next: {next}."),
        notes,
        resources: table,
    }
}

/// A series flat (within noise of its peak) from one level to its last, where Kneedle saw no
/// knee (flat from the first or second level it cannot see one; from the third, a small last
/// rise can hide it: nginx beside a hog, 5.4k, 7.2k, 7.75k, 7.67k, 7.59k req/s): it stops
/// scaling at that level.
fn flat_from_the_start(series: &SeriesAnalysis, levels: &[Level]) -> Option<usize> {
    let peak = series.peak.throughput_rps?;
    let i = levels
        .iter()
        .position(|l| level_within_noise(l.throughput_rps, peak, peak))?;
    let rest = &levels[i..];
    (levels.len() >= 3
        && rest.len() >= 2
        && rest
            .iter()
            .all(|l| !l.client_saturated && level_within_noise(l.throughput_rps, peak, peak)))
    .then_some(i)
}

/// A series whose throughput never rose 25% above its first level's, though too uneven for
/// the noise band to call it flat: "no knee up to 16 clients" would read as still scaling
/// (grpcio on its one CPU: 17.4k to 19.2k req/s from 1 client to 16).
fn never_grew(name: &str, levels: &[Level]) -> Option<String> {
    let (first, top) = (&levels[0], &levels[levels.len() - 1]);
    let xs = levels.iter().map(|l| l.throughput_rps);
    let (low, high) = (
        xs.clone().fold(f64::INFINITY, f64::min),
        xs.fold(0.0, f64::max),
    );
    let saturated = levels.iter().any(|l| l.client_saturated);
    (levels.len() >= 3 && !saturated && high < (1.0 + FLAT_GROWTH) * first.throughput_rps).then(
        || {
            format!(
                "{name} does not scale past its first level: throughput stays between {} and {} from {} to {}",
                rps(low),
                rps(high),
                clients_text(first.clients),
                clients_text(top.clients)
            )
        },
    )
}

/// The diagnosis' first words: where the series stops scaling, with the levels that are level
/// within noise named (so "stops scaling at 2" never hides that 16 measured the same), or
/// where it bends when it still grows beyond the noise past its knee.
fn opening(name: &str, series: &SeriesAnalysis, levels: &[Level], knee: Option<usize>) -> String {
    let top = &levels[levels.len() - 1];
    let Some(peak) = series.peak.throughput_rps else {
        return format!("{name} shows no knee up to {}", clients_text(top.clients));
    };
    let from = knee.map_or(0, |i| levels[i].clients);
    let flat: Vec<&Level> = levels
        .iter()
        .filter(|l| !l.client_saturated && l.clients >= from)
        .filter(|l| level_within_noise(l.throughput_rps, peak, peak))
        .collect();
    let flat_text = (flat.len() >= 2).then(|| {
        let labels: Vec<String> = flat.iter().map(|l| l.clients.to_string()).collect();
        let low = flat
            .iter()
            .map(|l| l.throughput_rps)
            .fold(f64::INFINITY, f64::min);
        format!(
            "throughput is level within noise ({:.0}% of the peak) at {}, between {} and {}",
            NOISE_FRACTION * 100.0,
            levels_text(&labels),
            rps(low),
            rps(peak)
        )
    });
    let Some(i) = knee else {
        if let Some(text) = never_grew(name, levels) {
            return text;
        }
        let mut text = format!("{name} shows no knee up to {}", clients_text(top.clients));
        match flat_text {
            Some(f) => text.push_str(&format!(" ({f})")),
            None => text.push_str(&format!(" (throughput {})", rps(top.throughput_rps))),
        }
        return text;
    };
    let k = &levels[i];
    if !level_within_noise(k.throughput_rps, peak, peak) {
        let at = series.peak.clients.unwrap_or(top.clients);
        let more_pct = 100.0 * (peak / k.throughput_rps - 1.0);
        // Beyond the noise but little: the knee is where it nearly stops.
        return if more_pct < 100.0 * FLAT_GROWTH {
            format!(
                "{name} stops scaling near {} clients (it bends there and gains {more_pct:.0}% more up to its peak at {at} clients)",
                k.clients
            )
        } else {
            format!(
                "{name} bends at {} clients and still grows {more_pct:.0}% up to its peak at {at} clients",
                k.clients
            )
        };
    }
    match flat_text {
        Some(f) => format!("{name} stops scaling at {} ({f})", clients_text(k.clients)),
        None => format!("{name} stops scaling at {}", clients_text(k.clients)),
    }
}

/// What a rule found.
struct Found {
    limit: Limit,
    confidence: Confidence,
    evidence: Vec<Evidence>,
    because: String,
    /// What to try next, in one line.
    next: String,
}

/// The series as the rules read it: its levels, and where the saturated part starts (the
/// knee, or the last level without one).
struct Ctx<'a> {
    levels: &'a [Level],
    from: usize,
    series: &'a SeriesAnalysis,
    profile: Option<&'a ProfileEvidence>,
}

impl Ctx<'_> {
    fn top(&self) -> &Level {
        &self.levels[self.levels.len() - 1]
    }
    fn first(&self) -> &Level {
        &self.levels[0]
    }
    fn past_knee(&self) -> &[Level] {
        &self.levels[self.from..]
    }
    /// Growth of a figure from the first level to the last one, as a fraction.
    fn growth(&self, f: fn(&Level) -> Option<f64>) -> Option<(f64, f64, f64)> {
        let a = f(self.first())?;
        let b = f(self.top())?;
        (a > 0.0 && self.levels.len() >= 2).then(|| (a, b, b / a - 1.0))
    }
    /// Level `low` fell below level `peak` beyond both's repetitions' noise: two or more
    /// repetitions each, and their 95% confidence intervals apart. One low step measured
    /// once may be noise; three that agree to 1% are a fall (shmkv's single channel at 5
    /// clients: 27.2k -> 19.6k req/s, CV under 1%, was read as flat).
    fn fall_confirmed(&self, peak: usize, low: usize) -> bool {
        let points = &self.series.points;
        let (Some(p), Some(l)) = (points.get(peak), points.get(low)) else {
            return false;
        };
        let (p, l) = (&p.throughput_rps, &l.throughput_rps);
        p.n >= 2 && l.n >= 2 && l.ci95_high() < p.ci95_low()
    }
    /// Level `i`, measured again after the series' last level (the drift check of a fall
    /// past it), gave no more than the last level by the fall fraction
    /// ([`fall_was_drift`](crate::analyze::knee::fall_was_drift)): measured at
    /// nearly the same time, the two loads give the same throughput, so the fall past `i` is
    /// the machine's slowing through the series, not the load's. Judged against the last level
    /// rather than the first measure, since a server whose state the run grew (a hot row's
    /// dead versions) is slower afterwards at every load. The note saying so.
    fn drifted(&self, i: usize) -> Option<String> {
        let (p, again) = self
            .series
            .points
            .get(i)
            .and_then(|p| Some((p, p.again_rps?)))?;
        let (first, last) = (p.throughput_rps.mean, self.top().throughput_rps);
        crate::analyze::knee::fall_was_drift(last, again).then(|| {
            format!(
                "{} measured again after the last level gave {} against {} at first ({:+.0}%), and the last level {}: the machine slowed through the series, so the fall past it is not read as the load's",
                super::peak::level_text(p.clients, p.rate_rps),
                rps(again),
                rps(first),
                100.0 * (again / first - 1.0),
                rps(last)
            )
        })
    }
    /// Level `i` was measured two or more times: its spread is known.
    fn repeated(&self, i: usize) -> bool {
        self.series
            .points
            .get(i)
            .is_some_and(|p| p.throughput_rps.n >= 2)
    }
    /// The series ran on its own CPUs, apart from the client's.
    fn separate_client(&self) -> bool {
        self.top().client_cpu_pct.is_some()
    }
    /// Throughput stopped growing after the knee: at most 25% more at the last level than
    /// at the knee, and the last level within 10% of the best past it, or below it at that
    /// one last level only: as in `coherency`, one low step is noise, not a fall (without
    /// this a series whose last step dipped was neither flat nor falling: undetermined).
    fn flat_throughput(&self) -> bool {
        let past = self.past_knee();
        let (peak_i, max) = past
            .iter()
            .map(|l| l.throughput_rps)
            .enumerate()
            .fold((0, 0.0), |m, (i, x)| if x > m.1 { (i, x) } else { m });
        let (knee, top) = (&past[0], self.top());
        let last = self.levels.len() - 1;
        let one_low_step =
            peak_i + 2 == past.len() && !self.fall_confirmed(self.from + peak_i, last);
        past.len() >= 2
            && top.throughput_rps <= (1.0 + FLAT_GROWTH) * knee.throughput_rps
            && (top.throughput_rps >= 0.9 * max || one_low_step)
    }
}

type Rule = fn(&Ctx) -> Option<Found>;

/// In the order they are tried: a saturated client hides everything; a queue of runnable
/// threads makes a cpuset look busy; a saturated single thread is the limit even when
/// throughput then falls (noise, or that thread doing more per request); a fall after the
/// peak is the most specific of the rest; lock waits after the I/O rules (a wait on a lock
/// around the disk is the disk's); a series still scaling while its storage is full is
/// latency-bound on it, when nothing else fits.
const RULES: [Rule; 14] = [
    client,
    limits_cpu::quota,
    limits_cpu::neighbour,
    oversubscription,
    one_thread,
    coherency,
    server_cpu,
    contention,
    limits_io::concurrency,
    limits_io::network,
    limits_io::disk,
    lock_waits,
    outside,
    resources::latency_bound,
];

fn ev(metric: Metric, value: f64, at: Option<usize>, note: impl Into<String>) -> Evidence {
    Evidence {
        metric,
        value,
        at_clients: at,
        note: note.into(),
    }
}

/// The built-in generator's own threads at level `l`: its busiest thread and the time its
/// threads waited for a CPU (a generator sharing its CPUs is late for that reason).
fn client_thread_evidence(l: &Level, evidence: &mut Vec<Evidence>) {
    if let Some(busiest) = l.client_busiest_pct {
        evidence.push(ev(
            Metric::ClientBusiestThreadPct,
            busiest,
            Some(l.clients),
            "the load generator's busiest thread, % of one CPU",
        ));
    }
    if let Some(wait) = l.client_run_delay_pct {
        evidence.push(ev(
            Metric::ClientRunDelayPct,
            wait,
            Some(l.clients),
            "the load generator's threads waiting for a CPU, % of the window",
        ));
    }
}

/// The first level whose load generator saturated after the server's CPUs had filled at an
/// earlier one: the server's limit came first, and the levels from there measured what the
/// generator could send (its own cost grows with its connections), so the diagnosis reads
/// the levels before it. redis's one thread full at 1 client, the generator saturated from 4
/// and throughput falling after: not the client's limit, nor a fall of the server's.
fn generator_saturated_late(levels: &[Level]) -> Option<usize> {
    let i = generator_limit_level(levels)?;
    let filled = |l: &Level| l.server_cpu_pct.is_some_and(|p| p >= BUSY_PCT);
    levels[..i].iter().any(filled).then_some(i)
}

/// The first level whose saturated generator held the series back. A saturated level that a
/// later unsaturated one outgrew beyond noise did not: the generator's cost per request fell
/// with more connections (one pipelined connection of 16 KiB SETs keeps it busy at 1 client
/// while throughput still rises to 8), so what stopped the series is read at the later levels.
fn generator_limit_level(levels: &[Level]) -> Option<usize> {
    let peak = levels.iter().map(|l| l.throughput_rps).fold(0.0, f64::max);
    let outgrown = |i: usize| {
        let x = levels[i].throughput_rps;
        levels[i + 1..].iter().any(|m| {
            !m.client_saturated
                && m.throughput_rps > x
                && !level_within_noise(m.throughput_rps, x, peak)
        })
    };
    (0..levels.len()).find(|&i| levels[i].client_saturated && !outgrown(i))
}

fn client(c: &Ctx) -> Option<Found> {
    // Saturated levels are left out of the knee: the first that held the series back names
    // the client's limit.
    if let Some(l) = generator_limit_level(c.levels).map(|i| &c.levels[i]) {
        let mut evidence = vec![ev(
            Metric::ClientSaturated,
            1.0,
            Some(l.clients),
            "the load generator's own CPUs were saturated",
        )];
        let mut because = format!("the load generator was saturated at {} clients", l.clients);
        if let Some(cpu) = l.client_cpu_pct {
            evidence.push(ev(
                Metric::ClientCpuPct,
                cpu,
                Some(l.clients),
                "the load generator's own CPU, % of its cpuset",
            ));
            because.push_str(&format!(" (it used {cpu:.0}% of its CPUs)"));
        }
        client_thread_evidence(l, &mut evidence);
        return Some(Found {
            limit: Limit::Client,
            confidence: if evidence.len() > 1 {
                Confidence::High
            } else {
                Confidence::Medium
            },
            evidence,
            because: format!("{because}: a client limit, not the server's"),
            next: "give the load generator more CPUs or threads (or another machine) and run again"
                .into(),
        });
    }
    let top = c.top();
    if let Some(cpu) = top.client_cpu_pct.filter(|&p| p >= BUSY_PCT) {
        let server = top.server_cpu_pct.unwrap_or(0.0);
        if server < BUSY_PCT {
            return Some(Found {
                limit: Limit::Client,
                confidence: Confidence::Medium,
                evidence: vec![
                    ev(Metric::ClientCpuPct, cpu, Some(top.clients), "the load generator's own CPU, % of its cpuset"),
                    ev(Metric::ServerCpuPct, server, Some(top.clients), "the server's own CPU, % of its cpuset"),
                ],
                because: format!(
                    "the load generator uses {cpu:.0}% of its CPUs while the server uses {server:.0}% of its own: a client limit, not the server's"
                ),
                next: "give the load generator more CPUs or threads (or another machine) and run again".into(),
            });
        }
    }
    // A link near its capacity explains fewer requests in flight than configured (issue 33).
    if limits_io::link_busy(top) {
        return None;
    }
    let ratio = top.little_ratio?;
    (ratio < 1.0 - 2.0 * crate::analyze::little::TOLERANCE).then(|| {
        let inflight = top.inflight.unwrap_or(0.0);
        Found {
            limit: Limit::Client,
            confidence: Confidence::Medium,
            evidence: vec![ev(
                Metric::LittleRatio,
                ratio,
                Some(top.clients),
                "X·R / L: fewer requests in flight than configured",
            )],
            because: format!(
                "by Little's law only {:.1} of the {inflight:.0} configured requests were in flight at {} clients: the client did not keep its load up",
                ratio * inflight,
                top.clients
            ),
            next: "check why the generator's requests were not in flight (its threads' CPU, connection errors, think time) and raise its connections".into(),
        }
    })
}

fn coherency(c: &Ctx) -> Option<Found> {
    let (peak_i, peak) = c
        .levels
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.throughput_rps.total_cmp(&b.1.throughput_rps))?;
    let top = c.top();
    // Two levels past the peak, the last well below it: one low step is noise, not a fall,
    // unless its repetitions and the peak's say it is one. Where both were repeated, their
    // repetitions judge the fall at any distance: grpcio on its full CPU measured 5.6k, 4.8k,
    // 5.9k, 5.2k, 4.9k calls/s once each, and a 13% dip two levels past a peak was noise.
    let last = c.levels.len() - 1;
    let past = if c.repeated(peak_i) && c.repeated(last) {
        c.fall_confirmed(peak_i, last)
    } else {
        peak_i + 2 <= last || (peak_i + 1 == last && c.fall_confirmed(peak_i, last))
    };
    if !past
        || top.throughput_rps >= RETROGRADE_FRACTION * peak.throughput_rps
        || full_and_level_from_the_start(c)
        || c.drifted(peak_i).is_some()
    {
        return None;
    }
    let mut evidence = vec![
        ev(
            Metric::ThroughputRps,
            peak.throughput_rps,
            Some(peak.clients),
            "the peak",
        ),
        ev(
            Metric::ThroughputRps,
            top.throughput_rps,
            Some(top.clients),
            "after the peak",
        ),
    ];
    // A fit the reports call not a finding is not quoted as evidence.
    let usl = c.series.usl.as_ref().filter(|u| {
        u.names(crate::analyze::usl::UslTerm::Coherency) && c.series.usl_caveat.is_none()
    });
    let mut because = format!(
        "throughput falls from {} at {} clients to {} at {}",
        rps(peak.throughput_rps),
        peak.clients,
        rps(top.throughput_rps),
        top.clients
    );
    if let Some(u) = usl {
        evidence.push(ev(
            Metric::UslKappa,
            u.kappa,
            None,
            "coherency coefficient of the USL fit",
        ));
        because.push_str(&format!(" (USL κ = {:.3}", u.kappa));
        if let Some(n) = u.n_star {
            evidence.push(ev(Metric::UslNStar, n, None, "load of the USL's peak"));
            because.push_str(&format!(", N* = {n:.1}"));
        }
        because.push(')');
    }
    if let Some(again) = c.series.points[peak_i].again_rps {
        evidence.push(ev(
            Metric::ThroughputRps,
            again,
            Some(peak.clients),
            "the peak's load measured again after the last level: the fall held",
        ));
        because.push_str(&format!(
            ", and {} clients measured again after {} still gave {}",
            peak.clients,
            top.clients,
            rps(again)
        ));
    }
    Some(Found {
        limit: Limit::Coherency,
        confidence: if usl.is_some() {
            Confidence::High
        } else {
            Confidence::Medium
        },
        evidence,
        because: format!("{because}: coherency/crosstalk"),
        next: "find the state every request touches (a hot lock, row or counter) with a profile at the peak and past it, and split it".into(),
    })
}

/// The server's CPUs full at the first level and throughput within 25% of that level's at
/// every level: it never scaled, so a dip past a noisy peak is its CPU's cost per request,
/// not crosstalk between requests (grpcio on its one CPU in CI: 5.6k, 4.8k, 5.9k, 5.2k and
/// 4.9k calls/s at 94-99% busy was read as coherency).
fn full_and_level_from_the_start(c: &Ctx) -> bool {
    let first = c.first();
    let band = |x: f64| {
        x <= (1.0 + FLAT_GROWTH) * first.throughput_rps
            && x >= first.throughput_rps / (1.0 + FLAT_GROWTH)
    };
    first.server_cpu_pct.is_some_and(|p| p >= BUSY_PCT)
        && c.levels.iter().all(|l| band(l.throughput_rps))
}

fn oversubscription(c: &Ctx) -> Option<Found> {
    // Threads that block more per request as load grows wait for something else than a CPU:
    // their run-queue wait is their wake-up together (a lock's waiters released at once, as
    // PostgreSQL's on a hot row), a contention or coherency cost, not more busy threads than
    // CPUs (a pool's busy workers block less per request as load grows, not more).
    if c.growth(|l| l.voluntary_cs_per_req)
        .is_some_and(|g| g.2 >= 2.0 * FLAT_GROWTH)
    {
        return None;
    }
    let (a, b, growth) = c.growth(|l| l.run_delay_us_per_req)?;
    let top = c.top();
    let waiting = top.run_delay_pct? / 100.0;
    let per_cpu = waiting / top.server_cpus.max(1) as f64;
    if growth + 1.0 < RUN_DELAY_GROWTH || per_cpu < WAITING_PER_CPU || queued_from_the_start(c) {
        return None;
    }
    let evidence = vec![
        ev(
            Metric::RunDelayUsPerReq,
            a,
            Some(c.first().clients),
            "run-queue wait per request at the first level",
        ),
        ev(
            Metric::RunDelayUsPerReq,
            b,
            Some(top.clients),
            "run-queue wait per request at the last level",
        ),
        ev(
            Metric::RunDelayPct,
            waiting * 100.0,
            Some(top.clients),
            "server threads' run-queue wait, % of the window",
        ),
    ];
    Some(Found {
        limit: Limit::Oversubscription,
        confidence: if per_cpu >= 2.0 * WAITING_PER_CPU {
            Confidence::High
        } else {
            Confidence::Medium
        },
        evidence,
        because: format!(
            "its threads wait on the run queue {} per request at {} clients against {} at {} ({waiting:.1} threads waiting on average for {} CPU{}): more runnable threads than CPUs (oversubscription)",
            us(b),
            top.clients,
            us(a),
            c.first().clients,
            top.server_cpus,
            if top.server_cpus == 1 { "" } else { "s" }
        ),
        next: "run fewer server threads than it has CPUs (or give it more CPUs)".into(),
    })
}

/// A run queue a thread per CPU deep already at the first level did not come with the load:
/// it is the server's standing thread count on a full CPU, and the CPU is the limit
/// (`server_cpu`). grpcio's Python server on one CPU: 1.8 threads waiting at 1 client, 2.7 at
/// 16, throughput level; one pool thread instead of four is slower (13.5k calls/s against
/// 16.0k), not faster, so "fewer threads" would be the wrong advice.
fn queued_from_the_start(c: &Ctx) -> bool {
    let first = c.first();
    first
        .run_delay_pct
        .is_some_and(|p| p / 100.0 / first.server_cpus.max(1) as f64 >= WAITING_PER_CPU)
}

fn one_thread(c: &Ctx) -> Option<Found> {
    let top = c.top();
    let (thread, pct) = top.busiest.clone()?;
    if pct < THREAD_BUSY_PCT {
        return None;
    }
    let cpuset = top.busiest_cpuset_pct.or(top.server_cpu_pct);
    // With room in the cpuset, or a one-CPU cpuset that this thread fills on its own
    // (adding CPUs would not help it either).
    let room = cpuset.is_some_and(|p| p < BUSY_PCT);
    let alone = top.server_cpus == 1;
    if !room && !alone {
        return None;
    }
    let mut evidence = vec![ev(
        Metric::BusiestThreadCpuPct,
        pct,
        Some(top.clients),
        format!("thread {thread}, % of one CPU"),
    )];
    if let Some(p) = cpuset {
        evidence.push(ev(
            Metric::ServerCpuPct,
            p,
            Some(top.clients),
            "the server's own CPU, % of its cpuset",
        ));
    }
    let mut because = format!("its busiest thread ({thread}) is {pct:.0}% of one CPU");
    if let Some(p) = cpuset.filter(|_| room) {
        because.push_str(&format!(
            " while its {} {p:.0}% busy",
            crate::units::count_is(top.server_cpus, "CPU")
        ));
    }
    let flat = c
        .growth(|l| l.cpu_us_per_req)
        .filter(|g| g.2.abs() < FLAT_GROWTH);
    if let Some((_, b, _)) = flat {
        evidence.push(ev(
            Metric::CpuUsPerReq,
            b,
            Some(top.clients),
            "server CPU per request stays flat",
        ));
        because.push_str(&format!(" and CPU per request stays at {}", us(b)));
    }
    Some(Found {
        limit: Limit::OneThread,
        confidence: if flat.is_some() && room {
            Confidence::High
        } else {
            Confidence::Medium
        },
        evidence,
        because: format!("{because}: a single-thread limit"),
        // As many busy threads as CPUs: a second thread on the same CPU can only share it.
        next: if room {
            "spread that thread's work over more threads (more workers or shards) or make it cheaper per request"
        } else {
            "give the server more CPUs and spread that thread's work over them (on its one CPU a second thread would only share it), or make it cheaper per request"
        }
        .into(),
    })
}

fn server_cpu(c: &Ctx) -> Option<Found> {
    let top = c.top();
    let busy = top.server_cpu_pct.filter(|&p| p >= BUSY_PCT)?;
    let (a, b, g) = c.growth(|l| l.cpu_us_per_req)?;
    // Growing CPU per request is contention's shape (tried next); falling, the cpuset is
    // still what caps throughput, each request only costs less as more are served per
    // wake-up (the Tomcat/rxNetty study's Tomcat: 38.9 -> 12.2 us at 95% busy).
    if g >= FLAT_GROWTH {
        return None;
    }
    let cost = if g <= -FLAT_GROWTH {
        format!(
            "while CPU per request falls from {} to {} (more requests served per wake-up)",
            us(a),
            us(b)
        )
    } else {
        format!("while CPU per request stays at {}", us(b))
    };
    Some(Found {
        limit: Limit::ServerCpu,
        confidence: if c.flat_throughput() && g > -FLAT_GROWTH {
            Confidence::High
        } else {
            Confidence::Medium
        },
        evidence: vec![
            ev(
                Metric::ServerCpuPct,
                busy,
                Some(top.clients),
                "the server's own CPU, % of its cpuset",
            ),
            ev(
                Metric::CpuUsPerReq,
                b,
                Some(top.clients),
                format!(
                    "server CPU per request, {:+.0}% from the first level",
                    100.0 * g
                ),
            ),
        ],
        because: format!(
            "its {} CPU{} {} {busy:.0}% busy {cost}: a server CPU limit",
            top.server_cpus,
            if top.server_cpus == 1 { "" } else { "s" },
            if top.server_cpus == 1 { "is" } else { "are" },
        ),
        next: "give the server more CPUs, or make each request cheaper (a profile pass shows where its CPU goes)".into(),
    })
}

fn contention(c: &Ctx) -> Option<Found> {
    if !c.flat_throughput() {
        return None;
    }
    let top = c.top();
    // Growing CPU per request limits throughput only where the CPU is the scarce resource;
    // blocking (voluntary switches) can limit it with idle CPUs.
    let busy = top.server_cpu_pct.is_some_and(|p| p >= IDLE_PCT);
    let cpu = c
        .growth(|l| l.cpu_us_per_req)
        .filter(|g| busy && g.2 >= FLAT_GROWTH);
    let cs = c
        .growth(|l| l.voluntary_cs_per_req)
        .filter(|g| g.2 >= 2.0 * FLAT_GROWTH);
    if cpu.is_none() && cs.is_none() {
        return None;
    }
    let mut evidence = Vec::new();
    let mut parts = Vec::new();
    if let Some((a, b, _)) = cpu {
        evidence.push(ev(
            Metric::CpuUsPerReq,
            a,
            Some(c.first().clients),
            "server CPU per request at the first level",
        ));
        evidence.push(ev(
            Metric::CpuUsPerReq,
            b,
            Some(top.clients),
            "server CPU per request at the last level",
        ));
        parts.push(format!("CPU per request grows from {} to {}", us(a), us(b)));
    }
    if let Some((a, b, _)) = cs {
        evidence.push(ev(
            Metric::VoluntaryCsPerReq,
            b,
            Some(top.clients),
            format!("voluntary switches per request ({a:.2} at the first level)"),
        ));
        parts.push(format!(
            "voluntary switches per request from {a:.2} to {b:.2}"
        ));
    }
    let sigma = c
        .series
        .usl
        .as_ref()
        .filter(|u| {
            u.names(crate::analyze::usl::UslTerm::Contention) && c.series.usl_caveat.is_none()
        })
        .map(|u| u.sigma)
        .filter(|&s| s > SIGMA_CLEAR);
    // Supporting evidence only: the profile's lock share grew between its two levels.
    let locks = c.profile.filter(|p| p.sync_grew());
    if let Some(p) = locks {
        parts.push(format!(
            "lock, futex and scheduler frames from {:.1}% to {:.1}% of CPU samples ({} clients to {})",
            p.a.sync_pct, p.b.sync_pct, p.a.clients, p.b.clients
        ));
    }
    let mut because = format!(
        "{} while throughput stays near {}",
        parts.join(" and "),
        rps(top.throughput_rps)
    );
    if let Some(s) = sigma {
        evidence.push(ev(
            Metric::UslSigma,
            s,
            None,
            "contention coefficient of the USL fit",
        ));
        because.push_str(&format!(" (USL σ = {s:.3})"));
    }
    Some(Found {
        limit: Limit::Contention,
        confidence: if sigma.is_some() || locks.is_some() {
            Confidence::High
        } else {
            Confidence::Medium
        },
        evidence,
        because: format!("{because}: contention"),
        next: "find the lock or shared resource that grows with load (a profile at two levels) and split or shorten it".into(),
    })
}

/// The server's threads waited on locks most of their working time, the waits grown with the
/// load (the resource table's locks row), while throughput stayed flat: a lock whose holder
/// sleeps (a JVM monitor held across a wait) leaves the CPUs idle and each request's switches
/// unchanged, so [`contention`]'s figures do not move; without this it reads as outside.
/// After the I/O rules: a backend waiting on a lock around its disk (PostgreSQL's WAL) is the
/// disk's.
fn lock_waits(c: &Ctx) -> Option<Found> {
    if !c.flat_throughput() {
        return None;
    }
    let row = resources::locks(c).filter(|r| r.state == resources::State::Saturated)?;
    let top = c.top();
    let share = row.time_share_pct.unwrap_or(0.0);
    let (a, b) = resources::lock_waiting_threads(c)?;
    let first = clients_text(c.first().clients);
    Some(Found {
        limit: Limit::Contention,
        confidence: Confidence::Medium,
        evidence: vec![
            ev(
                Metric::LockWaitPct,
                share,
                Some(top.clients),
                "the server threads' lock waits, % of their working time (thread states)",
            ),
            ev(
                Metric::LockWaitingThreads,
                b - a,
                Some(top.clients),
                format!("the server's threads waiting on a lock, mean, more than at {first} ({a:.1} there, {b:.1} here; thread states)"),
            ),
        ],
        because: format!(
            "the server's threads waiting on locks grow by {:.1} from {first} to {} ({share:.0}% of their working time) while throughput stays near {}: contention on a lock",
            b - a,
            top.clients,
            rps(top.throughput_rps)
        ),
        next: "find the lock the server's threads wait on (a thread dump, or off-CPU stacks at two levels) and shorten what is done while holding it".into(),
    })
}

fn outside(c: &Ctx) -> Option<Found> {
    let top = c.top();
    let server = top.server_cpu_pct?;
    if server >= IDLE_PCT || !c.flat_throughput() {
        return None;
    }
    if top.client_cpu_pct.is_some_and(|p| p >= IDLE_PCT) {
        return None;
    }
    if top.busiest.as_ref().is_some_and(|b| b.1 >= THREAD_BUSY_PCT) {
        return None;
    }
    let (a, b, g) = c.growth(|l| l.latency_us)?;
    let ratio = top.little_ratio?;
    if g < FLAT_GROWTH || (ratio - 1.0).abs() > 2.0 * crate::analyze::little::TOLERANCE {
        return None;
    }
    let mut evidence = vec![
        ev(
            Metric::ServerCpuPct,
            server,
            Some(top.clients),
            "the server's own CPU, % of its cpuset",
        ),
        ev(
            Metric::MeanLatencyUs,
            a,
            Some(c.first().clients),
            "mean latency at the first level",
        ),
        ev(
            Metric::MeanLatencyUs,
            b,
            Some(top.clients),
            "mean latency at the last level",
        ),
        ev(
            Metric::LittleRatio,
            ratio,
            Some(top.clients),
            "X·R / L: the latency is the requests in flight over the throughput",
        ),
    ];
    limits_cpu::ruled_out(c, &mut evidence);
    let mut sides = format!("server {server:.0}% of its CPUs");
    if let Some(p) = top.client_cpu_pct {
        evidence.push(ev(
            Metric::ClientCpuPct,
            p,
            Some(top.clients),
            "the load generator's own CPU, % of its cpuset",
        ));
        sides.push_str(&format!(", client {p:.0}% of its own"));
    }
    evidence.extend(limits_io::ruled_out(c));
    // The server's own connections say where the requests wait: the process they go to.
    let hop = next_hop::outside_hop(top);
    if let Some(h) = hop {
        evidence.extend(h.evidence(Some(top.clients)));
    }
    let (where_, next) = match hop {
        Some(h) => (
            format!(", in its upstream {}", h.reading()),
            h.limiting().next_step(),
        ),
        None => (
            String::new(),
            "find what each request waits on outside both processes (a backend, a pool, the network or the disk) and widen it".into(),
        ),
    };
    Some(Found {
        limit: Limit::Outside,
        confidence: if c.separate_client() {
            Confidence::High
        } else {
            Confidence::Medium
        },
        evidence,
        because: format!(
            "neither side is busy ({sides}) while throughput stays near {} and mean latency grows from {} to {} as Little's law predicts (X·R/L = {ratio:.2}): the limit is outside both processes{where_}",
            rps(top.throughput_rps),
            us(a),
            us(b)
        ),
        next,
    })
}

/// `undetermined` for a series whose server was not observed: no client limit was found,
/// and no server-side limit can be told.
fn not_observed(c: &Ctx, why: &str) -> (Limit, Confidence, Vec<Evidence>, String, String) {
    let at = Some(c.top().clients);
    let mut evidence = vec![ev(
        Metric::ServerObserved,
        0.0,
        at,
        format!("server-side limits: not observed ({why})"),
    )];
    evidence.extend(
        ruled_out(c)
            .into_iter()
            .filter(|e| e.metric.is_client() || e.metric == Metric::LittleRatio),
    );
    let because = "the server was not observed (a server already running with no pid, pidfile or process), so only a client-side limit can be told and none was found: undetermined".to_string();
    let next =
        "give the server's pid (pid_file or command in the spec) so that its side is observed"
            .to_string();
    (
        Limit::Undetermined,
        Confidence::Low,
        evidence,
        because,
        next,
    )
}

/// For `undetermined`: the figure that ruled out each limit, or that it was missing.
fn ruled_out(c: &Ctx) -> Vec<Evidence> {
    let top = c.top();
    let at = Some(top.clients);
    let missing = |metric: Metric, why: &str| ev(metric, f64::NAN, at, why);
    let mut out = vec![ev(
        Metric::ClientSaturated,
        0.0,
        at,
        "client: no level had the load generator saturated or its own CPU at 90% of its cpuset",
    )];
    client_thread_evidence(top, &mut out);
    if let Some(r) = top.little_ratio {
        out.push(ev(
            Metric::LittleRatio,
            r,
            at,
            "client: X·R / L did not show fewer requests in flight than configured; outside: it needs latency growing with X·R / L within 20% of 1",
        ));
    }
    out.push(match top.server_cpu_pct {
        Some(p) => ev(Metric::ServerCpuPct, p, at, format!("server_cpu: the cpuset was {p:.0}% busy (a limit needs {BUSY_PCT:.0}% and a CPU per request that does not grow); outside: it needs under {IDLE_PCT:.0}%")),
        None => missing(Metric::ServerCpuPct, "server_cpu, outside: the server's CPU was not observed"),
    });
    out.push(match &top.busiest {
        Some((name, p)) => ev(Metric::BusiestThreadCpuPct, *p, at, format!("one_thread: the busiest thread ({name}) was {p:.0}% of one CPU (a limit needs {THREAD_BUSY_PCT:.0}%)")),
        None => missing(Metric::BusiestThreadCpuPct, "one_thread: no per-thread figures"),
    });
    out.push(match top.run_delay_pct {
        Some(p) => ev(Metric::RunDelayPct, p, at, "oversubscription: run-queue wait did not grow enough per request, too few threads waited, or as many waited already at the first level"),
        None => missing(Metric::RunDelayPct, "oversubscription: no run-queue figures (schedstat)"),
    });
    out.push(match c.growth(|l| l.cpu_us_per_req) {
        Some((_, b, g)) => ev(
            Metric::CpuUsPerReq,
            b,
            at,
            format!(
                "contention: CPU per request changed {:+.0}% with throughput {}",
                100.0 * g,
                if c.flat_throughput() {
                    "flat"
                } else {
                    "still moving"
                }
            ),
        ),
        None => missing(Metric::CpuUsPerReq, "contention: no CPU per request"),
    });
    out.push(ev(
        Metric::ThroughputRps,
        top.throughput_rps,
        at,
        "coherency: throughput did not fall 10% below its peak",
    ));
    limits_cpu::ruled_out(c, &mut out);
    out.extend(limits_io::ruled_out(c));
    out
}

fn load_of(p: &LoadPoint) -> f64 {
    p.rate_rps.unwrap_or(p.clients as f64)
}

fn level(p: &LoadPoint, series: &SeriesAnalysis, steps: &[&StepResult]) -> Level {
    let reps: Vec<&StepResult> = steps
        .iter()
        .copied()
        .filter(|s| s.clients == p.clients && s.rate_rps == p.rate_rps)
        .collect();
    let mean = |f: &dyn Fn(&StepResult) -> Option<f64>| {
        let v: Vec<f64> = reps
            .iter()
            .filter_map(|s| f(s))
            .filter(|x| x.is_finite())
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let little: Vec<&LittleRow> = series
        .little
        .iter()
        .filter(|r| r.clients == p.clients)
        .collect();
    let little_mean = |f: fn(&LittleRow) -> f64| {
        (!little.is_empty()).then(|| little.iter().map(|r| f(r)).sum::<f64>() / little.len() as f64)
    };
    let observed: Vec<Observation> = reps
        .iter()
        .filter_map(|s| s.observation().cloned())
        .collect();
    let per_request: Vec<PerRequest> = reps.iter().map(|s| s.per_request().clone()).collect();
    // The busiest thread and its cpuset's share from the same repetition: from two, a
    // thread could read busier than its whole cpuset.
    let busiest_rep = observed
        .iter()
        .filter_map(|o| {
            let b = o.threads.as_ref()?.busiest.as_ref()?;
            let cpuset = o.server.as_ref().filter(|_| o.window_s > 0.0).map(|t| {
                100.0 * (t.user_s + t.sys_s) / o.window_s / o.server_cpus.len().max(1) as f64
            });
            Some(((b.name.clone(), b.cpu_pct), cpuset))
        })
        .max_by(|a, b| a.0 .1.total_cmp(&b.0 .1));
    let busiest = busiest_rep.as_ref().map(|b| b.0.clone());
    let busiest_cpuset_pct = busiest_rep.and_then(|b| b.1);
    let mean_of = |v: Vec<Option<f64>>| {
        let v: Vec<f64> = v.into_iter().flatten().filter(|x| x.is_finite()).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let per = |f: fn(&PerRequest) -> Option<f64>| mean_of(per_request.iter().map(f).collect());
    let separate = reps.first().is_some_and(|s| {
        let server = crate::cpuset::parse(&s.server_cpus).unwrap_or_default();
        let client = crate::cpuset::parse(&s.client_cpus).unwrap_or_default();
        !client.is_empty() && !server.is_empty() && !client.iter().any(|c| server.contains(c))
    });
    Level {
        clients: p.clients,
        throughput_rps: p.throughput_rps.mean,
        latency_us: p.mean_latency_us.map(|s| s.mean),
        server_cpu_pct: p.server_cpu_pct,
        server_cpus: reps
            .first()
            .and_then(|s| crate::cpuset::parse(&s.server_cpus).ok())
            .map_or(0, |c| c.len()),
        client_saturated: p.client_saturated,
        client_cpu_pct: if separate {
            mean(&|s| client_cpu_pct(s))
        } else {
            None
        },
        client_busiest_pct: mean(&|s| s.load.as_ref()?.client_cpu.busiest_thread_pct),
        client_run_delay_pct: mean(&|s| s.load.as_ref()?.client_cpu.run_delay_pct),
        cpu_us_per_req: per(|p| p.cpu_us_per_req.total),
        voluntary_cs_per_req: per(|p| p.voluntary_cs_per_req),
        run_delay_us_per_req: per(|p| p.run_delay_us_per_req),
        run_delay_pct: mean_of(
            observed
                .iter()
                .map(|o| o.threads.as_ref()?.run_delay_pct)
                .collect(),
        ),
        busiest,
        busiest_cpuset_pct,
        little_ratio: little_mean(|r| r.check.ratio),
        inflight: little_mean(|r| r.check.inflight),
        throughput_cv: p.throughput_rps.cv,
        noisy: p.noisy,
        cpu: limits_cpu::cpu_level(&reps),
        io: limits_io::io_level(&observed, p.throughput_rps.mean),
        states: resources::states_level(&observed),
    }
}

/// The load generator's own CPU (the engine's threads, or the external tool's process) in
/// percent of its cpuset over the step: not the CPUs' busy %, which counts every other
/// process on them too.
fn client_cpu_pct(s: &StepResult) -> Option<f64> {
    let load = s.load.as_ref()?;
    let cpus = crate::cpuset::parse(&s.client_cpus).ok()?.len();
    (load.duration_s > 0.0 && cpus > 0).then(|| {
        100.0 * (load.client_cpu.user_s + load.client_cpu.sys_s) / load.duration_s / cpus as f64
    })
}

/// `12.3k req/s`.
fn rps(x: f64) -> String {
    if x >= 1e4 {
        format!("{:.1}k req/s", x / 1e3)
    } else {
        format!("{x:.0} req/s")
    }
}

/// `7.73 µs`, `12.3 ms`: see [`crate::units::duration_us`].
fn us(x: f64) -> String {
    crate::units::duration_us(x)
}

pub mod metric;
pub use metric::{Metric, Unit};

pub mod profile;
pub use profile::ProfileEvidence;

mod limits_cpu;
mod limits_io;
mod next_hop;
pub mod resources;
pub use resources::ResourceRow;

mod reps;
mod wakeup;
pub use wakeup::add_wakeup_sentences;

#[cfg(test)]
mod tests;

//! The cross-CPU wake-up sentence: when a target ran both `shared` (server and client on the
//! same CPUs) and `separated`, and at the lowest load level both measured the separated
//! placement's median latency is far above the shared one's, each request pays for waking a
//! thread on another CPU; on this VM about 3× at 1 client. One sentence, with both figures,
//! added to the separated series' diagnosis.

use super::{ev, us, Diagnosis, Metric};
use crate::record::steps::StepResult;

/// The separated p50 at least this many times the shared one's is worth a sentence.
pub const WAKEUP_RATIO: f64 = 2.0;

/// Adds the sentence and its two figures to each `separated` diagnosis whose target also ran
/// `shared`, where the lowest common level shows the gap. `steps` are the run's ok steps.
pub fn add_wakeup_sentences(diagnoses: &mut [Diagnosis], steps: &[&StepResult]) {
    for d in diagnoses.iter_mut().filter(|d| d.placement == "separated") {
        let p50s = |placement: &str| -> Vec<(usize, f64)> {
            let mut levels: Vec<usize> = steps
                .iter()
                .filter(|s| s.target == d.target && s.placement == placement)
                .filter(|s| s.rate_rps.is_none())
                .map(|s| s.clients)
                .collect();
            levels.sort_unstable();
            levels.dedup();
            levels
                .into_iter()
                .filter_map(|c| Some((c, p50_at(steps, &d.target, placement, c)?)))
                .collect()
        };
        let (separated, shared) = (p50s("separated"), p50s("shared"));
        let Some(&(clients, sep)) = separated
            .iter()
            .find(|(c, _)| shared.iter().any(|(s, _)| s == c))
        else {
            continue;
        };
        let Some(&(_, sh)) = shared.iter().find(|(c, _)| *c == clients) else {
            continue;
        };
        if sep < WAKEUP_RATIO * sh {
            continue;
        }
        d.evidence.push(ev(
            Metric::P50LatencyUs,
            sep,
            Some(clients),
            "median latency at the lowest level, separated placement",
        ));
        d.evidence.push(ev(
            Metric::SharedP50LatencyUs,
            sh,
            Some(clients),
            "median latency at the same level with server and client sharing CPUs",
        ));
        // Before the sentence's last words, what to try next.
        let at = d.sentence.rfind(" Next: ").unwrap_or(d.sentence.len());
        d.sentence.insert_str(at, &format!(
            " At {clients} client{} its median latency is {} against {} when server and client share CPUs ({:.1}×): the cost of waking threads on another CPU.",
            if clients == 1 { "" } else { "s" },
            us(sep),
            us(sh),
            sep / sh
        ));
    }
}

/// Mean over the repetitions of a level's p50 (µs), if every one reported a positive one.
fn p50_at(steps: &[&StepResult], target: &str, placement: &str, clients: usize) -> Option<f64> {
    let v: Vec<f64> = steps
        .iter()
        .filter(|s| s.target == target && s.placement == placement && s.clients == clients)
        .filter(|s| s.rate_rps.is_none())
        .map(|s| s.load.as_ref().map_or(f64::NAN, |l| l.latency_us.p50))
        .collect();
    (!v.is_empty() && v.iter().all(|x| x.is_finite() && *x > 0.0))
        .then(|| v.iter().sum::<f64>() / v.len() as f64)
}

#[cfg(test)]
mod tests {
    use crate::analyze::run::analyze_steps;
    use crate::analyze::run::diagnosis::Metric;
    use crate::record::steps::{StepResult, StepStatus};

    fn step(placement: &str, clients: usize, p50_us: f64) -> StepResult {
        let id = format!("web.{placement}.c{clients}");
        let mut r = StepResult::empty(id, "web", placement, clients, 0);
        r.status = StepStatus::Ok;
        r.inflight = clients;
        let mut load = crate::record::load::LoadReport {
            throughput_rps: clients as f64 / p50_us * 1e6,
            duration_s: 1.0,
            ..Default::default()
        };
        load.latency_us.mean = p50_us;
        load.latency_us.p50 = p50_us;
        r.load = Some(load);
        r
    }

    fn sentences(separated_p50_us: f64) -> Vec<String> {
        // Shared from 2 clients only: the 1-client level is not compared.
        let mut steps = vec![step("shared", 2, 30.0), step("shared", 4, 40.0)];
        for (c, f) in [(1, 0.5), (2, 1.0), (4, 1.5)] {
            steps.push(step("separated", c, separated_p50_us * f));
        }
        analyze_steps(&steps)
            .diagnosis
            .iter()
            .map(|d| d.sentence.clone())
            .collect()
    }

    #[test]
    fn a_separated_median_far_above_the_shared_one_gets_its_sentence() {
        let s = sentences(95.0);
        assert!(
            s[1].contains(
                " At 2 clients its median latency is 95.0 µs against 30.0 µs when server and client share CPUs (3.2×): the cost of waking threads on another CPU. Next: "
            ),
            "{s:?}"
        );
        assert!(!s[0].contains("waking"), "{s:?}");
        let d = &analyze_steps(&[step("shared", 1, 30.0), step("separated", 1, 95.0)]).diagnosis;
        let figure = |m: Metric| d[1].figure(m).unwrap();
        assert_eq!(
            (
                figure(Metric::P50LatencyUs),
                figure(Metric::SharedP50LatencyUs)
            ),
            (95.0, 30.0)
        );
    }

    #[test]
    fn under_twice_the_shared_median_says_nothing() {
        assert!(sentences(59.0).iter().all(|s| !s.contains("waking")));
        let alone = analyze_steps(&[step("separated", 1, 95.0)]).diagnosis;
        assert!(!alone[0].sentence.contains("waking"));
    }
}

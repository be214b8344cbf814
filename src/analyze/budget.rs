//! A step's time budget: where the server's and the load generator's threads spent the
//! window (their thread states, summed), and the same per request, so that a request's
//! latency at the lowest level decomposes into the load generator's own work, the server's
//! time in each state, and the rest (the network, the kernel's queues, time no thread held).
//!
//! The rule of the decomposition: a request's time on the server is the server threads'
//! time on something (every state but waiting for work) divided by the requests of the
//! window; on the load generator, its threads' own work (on a CPU, waiting for one, other
//! waits) divided likewise — not its waits on the server, which are the request's time
//! elsewhere. What the mean latency holds beyond both is `outside_s`. With one request in
//! flight at a time (the lowest level of a closed loop), each part is that request's own;
//! with more, the threads' time is shared by the requests they served together, and
//! background threads' time (a timer, a flusher) counts in as well: `overlap` says when the
//! parts add up to more than the latency. A group of threads that was on a CPU for under 1% of
//! its time is parked: its futex waits are waiting for work, not a lock (see `working_total`).

use serde::{Deserialize, Serialize};

use crate::record::observed::{Observation, StateSeconds, ThreadStates};
use crate::record::steps::StepResult;

/// Where a step's threads and requests spent their time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestBudget {
    /// The window's length, in seconds.
    pub window_s: f64,
    /// Requests completed in the window.
    pub requests: u64,
    /// The server tree's thread-seconds in each state over the window (None when not observed).
    pub server_window: Option<StateSeconds>,
    /// The load generator's thread-seconds in each state over the window.
    pub client_window: Option<StateSeconds>,
    /// The server tree's thread-seconds in each state per request (None without requests).
    pub server_per_req: Option<StateSeconds>,
    /// The load generator's thread-seconds in each state per request.
    pub client_per_req: Option<StateSeconds>,
    /// The mean latency decomposed (None without a latency or a server observation).
    pub latency: Option<LatencyParts>,
}

/// A request's mean latency in parts, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyParts {
    /// The mean latency being decomposed, in seconds.
    pub latency_s: f64,
    /// The load generator's own work per request: on a CPU, waiting for one, and waits that
    /// are not on the server (storage, locks, paging, other), in seconds.
    pub client_s: f64,
    /// The server's time per request in each state, waiting for work left out (zero), in
    /// seconds.
    pub server: StateSeconds,
    /// What neither side's threads hold: the network, the kernel's socket queues, in seconds
    /// (zero when the parts exceed the latency).
    pub outside_s: f64,
    /// The parts add up to more than the latency: several requests shared the threads' time,
    /// or background threads were busy; the parts are then shares, not a sum.
    pub overlap: bool,
}

/// A group of threads on a CPU for less than this share of their time is parked.
const PARKED_SHARE: f64 = 0.01;

/// Every group's seconds of `ts`, summed; a parked group's lock waits count as waiting for
/// work. A futex is both a lock and how an idle pool thread, a condition variable or a join
/// waits: a thread held back by a lock runs between its waits (its group's CPU is a share of
/// its time), a parked one hardly runs at all (a reporter waiting on a condition variable the
/// whole window, a metrics thread woken once). The budget's and the resource table's one
/// reading of the states.
pub fn working_total(ts: &ThreadStates) -> StateSeconds {
    let mut sum = StateSeconds::default();
    for g in &ts.groups {
        let mut s = g.seconds;
        if s.on_cpu_user_s + s.on_cpu_sys_s < PARKED_SHARE * s.total_s() {
            s.idle_s += s.lock_s;
            s.lock_s = 0.0;
        }
        sum.add(&s);
    }
    sum
}

/// The time budget of a step: its observation's thread states over `requests` completed
/// requests of mean latency `mean_latency_s`.
pub fn request_budget(
    obs: &Observation,
    requests: u64,
    mean_latency_s: Option<f64>,
) -> RequestBudget {
    let windows = (
        obs.thread_states.as_ref().map(working_total),
        obs.client_thread_states.as_ref().map(working_total),
    );
    from_windows(obs.window_s, requests, windows, mean_latency_s)
}

/// The time budget of a load level: its repetitions' windows with thread states summed
/// (thread-seconds and requests alike), against their mean latency. None when no repetition
/// sampled the server's thread states.
pub fn level_budget(reps: &[&StepResult]) -> Option<RequestBudget> {
    let sampled: Vec<(&Observation, u64, f64)> = reps
        .iter()
        .filter_map(|s| {
            let obs = s.observation().filter(|o| o.thread_states.is_some())?;
            let load = s.load.as_ref()?;
            Some((obs, load.requests, load.latency_us.mean))
        })
        .collect();
    if sampled.is_empty() {
        return None;
    }
    let sum = |f: fn(&Observation) -> Option<&ThreadStates>| {
        let parts: Vec<StateSeconds> = sampled
            .iter()
            .filter_map(|x| f(x.0).map(working_total))
            .collect();
        (!parts.is_empty()).then(|| {
            parts.iter().fold(StateSeconds::default(), |mut a, p| {
                a.add(p);
                a
            })
        })
    };
    let windows = (
        sum(|o| o.thread_states.as_ref()),
        sum(|o| o.client_thread_states.as_ref()),
    );
    let latencies: Vec<f64> = sampled
        .iter()
        .map(|x| x.2)
        .filter(|l| l.is_finite())
        .collect();
    let mean_latency_s = (!latencies.is_empty())
        .then(|| latencies.iter().sum::<f64>() / latencies.len() as f64 / 1e6);
    Some(from_windows(
        sampled.iter().map(|x| x.0.window_s).sum(),
        sampled.iter().map(|x| x.1).sum(),
        windows,
        mean_latency_s,
    ))
}

/// The budget of windows lasting `window_s` with `requests` completed, from the server's and
/// the load generator's thread-seconds in them.
fn from_windows(
    window_s: f64,
    requests: u64,
    (server_window, client_window): (Option<StateSeconds>, Option<StateSeconds>),
    mean_latency_s: Option<f64>,
) -> RequestBudget {
    let per = |w: &Option<StateSeconds>| {
        w.filter(|_| requests > 0)
            .map(|w| w.scaled(1.0 / requests as f64))
    };
    let server_per_req = per(&server_window);
    let client_per_req = per(&client_window);
    let latency = match (mean_latency_s, server_per_req) {
        (Some(l), Some(s)) if l.is_finite() && l >= 0.0 => {
            Some(decompose(l, &s, client_per_req.as_ref()))
        }
        _ => None,
    };
    RequestBudget {
        window_s,
        requests,
        server_window,
        client_window,
        server_per_req,
        client_per_req,
        latency,
    }
}

/// Splits `latency_s` into the load generator's own work, the server's time on something and
/// the rest (see the module documentation), from per-request thread-seconds.
pub fn decompose(
    latency_s: f64,
    server: &StateSeconds,
    client: Option<&StateSeconds>,
) -> LatencyParts {
    let server = StateSeconds {
        idle_s: 0.0,
        ..*server
    };
    let client_s = client.map_or(0.0, |c| c.busy_s() - c.socket_s);
    let held_s = client_s + server.busy_s();
    LatencyParts {
        latency_s,
        client_s,
        server,
        outside_s: (latency_s - held_s).max(0.0),
        overlap: held_s > latency_s * 1.001,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::observed::ThreadStateGroup;

    fn states(groups: &[StateSeconds]) -> ThreadStates {
        ThreadStates {
            groups: groups
                .iter()
                .map(|&seconds| ThreadStateGroup {
                    seconds,
                    threads: 1,
                    ..ThreadStateGroup::default()
                })
                .collect(),
            ..ThreadStates::default()
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// One request at a time for 1 s: 100 requests of 10 ms. The server's worker spends
    /// 2 ms of each on a CPU and 6 ms in fsync, and idles the rest; the load generator works
    /// 1 ms and waits 9 ms on the server. So 1 ms of each request is in neither: the network.
    #[test]
    fn a_requests_latency_decomposes_into_client_server_states_and_the_rest() {
        let worker = StateSeconds {
            on_cpu_user_s: 0.15,
            on_cpu_sys_s: 0.05,
            storage_s: 0.6,
            idle_s: 0.2,
            ..StateSeconds::default()
        };
        let housekeeping = StateSeconds {
            other_s: 0.0,
            idle_s: 1.0,
            ..StateSeconds::default()
        };
        let load = StateSeconds {
            on_cpu_user_s: 0.1,
            socket_s: 0.9,
            ..StateSeconds::default()
        };
        let obs = Observation {
            window_s: 1.0,
            thread_states: Some(states(&[worker, housekeeping])),
            client_thread_states: Some(states(&[load])),
            ..Observation::default()
        };
        let b = request_budget(&obs, 100, Some(0.010));
        let server = b.server_per_req.unwrap();
        assert!(close(server.storage_s, 0.006) && close(server.idle_s, 0.012));
        assert!(
            close(b.server_window.unwrap().total_s(), 2.0),
            "two threads, 1 s each"
        );
        let parts = b.latency.unwrap();
        assert!(close(parts.client_s, 0.001), "{parts:?}");
        assert!(close(parts.server.storage_s, 0.006));
        assert!(close(
            parts.server.on_cpu_user_s + parts.server.on_cpu_sys_s,
            0.002
        ));
        assert_eq!(
            parts.server.idle_s, 0.0,
            "waiting for work is no part of a request"
        );
        assert!(close(parts.outside_s, 0.001), "{parts:?}");
        assert!(!parts.overlap);
    }

    #[test]
    fn parts_beyond_the_latency_are_flagged_and_nothing_is_made_up() {
        let busy = StateSeconds {
            on_cpu_user_s: 0.5,
            lock_s: 3.0,
            ..StateSeconds::default()
        };
        let obs = Observation {
            window_s: 1.0,
            thread_states: Some(states(&[busy])),
            ..Observation::default()
        };
        let b = request_budget(&obs, 100, Some(0.010));
        let parts = b.latency.unwrap();
        assert!(parts.overlap && parts.outside_s == 0.0, "{parts:?}");
        assert!(b.client_per_req.is_none() && close(parts.client_s, 0.0));
        // No request: no per-request figure, the window's figures stay.
        let none = request_budget(&obs, 0, Some(0.010));
        assert!(none.server_per_req.is_none() && none.latency.is_none());
        assert!(close(none.server_window.unwrap().lock_s, 3.0));
        // No observation: nothing.
        let empty = request_budget(&Observation::default(), 100, Some(0.01));
        assert!(empty.server_window.is_none() && empty.latency.is_none());
    }

    /// A reporter thread in a futex the whole window and a metrics thread that ran 2 ms of
    /// 763 (the built-in reactor's, measured) are parked: waiting for work, no part of a
    /// request. Two workers taking turns at one lock, each on a CPU half its time, are held
    /// back by it. Catches every futex counted as a lock (the reactor's requests read 189 µs
    /// of lock each, at one client, with no lock in its path) and a rule that parks a
    /// contended pool.
    #[test]
    fn parked_threads_wait_for_work_and_contended_ones_on_a_lock() {
        let parked = [
            StateSeconds {
                lock_s: 0.763,
                ..StateSeconds::default()
            },
            StateSeconds {
                on_cpu_user_s: 0.002,
                runqueue_s: 0.082,
                lock_s: 0.679,
                ..StateSeconds::default()
            },
        ];
        let w = working_total(&states(&parked));
        assert!(
            close(w.lock_s, 0.0) && close(w.idle_s, 0.763 + 0.679),
            "{w:?}"
        );
        let workers = StateSeconds {
            on_cpu_user_s: 1.0,
            lock_s: 1.0,
            ..StateSeconds::default()
        };
        let w = working_total(&states(&[workers]));
        assert!(close(w.lock_s, 1.0) && close(w.idle_s, 0.0), "{w:?}");
    }
}

//! The rule client-group hosts follow (`groups.rs`), for the host of a remote target: a host
//! lost during a step (its engine's channel, an ssh session, ended) fails that step with the reason; the next step
//! tries it once more (the target is started again); a second failure in a row marks it down
//! for the rest of the run with a note, and every later start of a target there fails at once
//! with why, instead of paying ssh's connect timeout again each time.

use std::collections::BTreeMap;

use super::groups::FAILED_STEPS_BEFORE_DOWN;

/// The remote targets' hosts: failures in a row, those marked down, the notes to report.
#[derive(Debug, Default)]
pub struct ServerHosts {
    failed_in_a_row: BTreeMap<String, u32>,
    down: BTreeMap<String, String>,
    notes: Vec<String>,
}

impl ServerHosts {
    /// Why `host` is down, if it was marked so.
    pub fn down_reason(&self, host: &str) -> Option<String> {
        self.down.get(host).map(|why| {
            format!(
                "host {host:?} was marked down after failing {FAILED_STEPS_BEFORE_DOWN} steps in a row: {why}"
            )
        })
    }

    /// Whether `host` failed the last step that used it (the next failure marks it down).
    pub fn on_probation(&self, host: &str) -> bool {
        self.failed_in_a_row.get(host).is_some_and(|&n| n > 0)
    }

    /// `host` was lost (or could not be reached) for a step, `why`; at
    /// `FAILED_STEPS_BEFORE_DOWN` in a row it is marked down with a note.
    pub fn failed(&mut self, host: &str, why: &str) {
        let count = self.failed_in_a_row.entry(host.to_string()).or_insert(0);
        *count += 1;
        if *count == FAILED_STEPS_BEFORE_DOWN && !self.down.contains_key(host) {
            self.down.insert(host.to_string(), why.to_string());
            self.notes.push(format!(
                "host {host}: marked down for the rest of the run after failing \
                 {FAILED_STEPS_BEFORE_DOWN} steps in a row; its targets' later steps fail at \
                 once. Last reason: {why}"
            ));
        }
    }

    /// A target started on `host`: it answers again.
    pub fn ok(&mut self, host: &str) {
        self.failed_in_a_row.remove(host);
    }

    /// The notes not yet taken.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tried_once_more_then_down_with_a_note() {
        let mut h = ServerHosts::default();
        h.failed("srv", "ssh session ended");
        assert!(h.down_reason("srv").is_none() && h.on_probation("srv"));
        assert!(h.take_notes().is_empty());
        h.failed("srv", "unreachable");
        let why = h.down_reason("srv").unwrap();
        assert!(
            why.contains("marked down") && why.ends_with("unreachable"),
            "{why}"
        );
        let notes = h.take_notes();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("host srv: marked down"), "{notes:?}");
        // Said once.
        h.failed("srv", "again");
        assert!(h.take_notes().is_empty());
    }

    #[test]
    fn a_start_in_between_resets_the_count() {
        let mut h = ServerHosts::default();
        h.failed("srv", "lost");
        h.ok("srv");
        assert!(!h.on_probation("srv"));
        h.failed("srv", "lost");
        assert!(h.down_reason("srv").is_none());
        assert!(h.down_reason("other").is_none());
    }
}

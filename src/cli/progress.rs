//! The progress bar of `stairbench run` and `demo`: planned step i of N with the repetition
//! inside it, the time left by the plan's model (the dry run's estimate, refined by the runs
//! so far), live ops/s (an indicatif bar on a terminal, plain lines otherwise), behind the
//! runner's [`Progress`] trait.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::record::steps::{StepResult, StepStatus};
use crate::sweep::plan::estimate::show_duration;
use crate::sweep::progress::{Position, Progress};

/// An indicatif bar on stderr; one line per step when stderr is not a terminal or `CI` is
/// set (no bar redrawn into a log); nothing but notes with `-q`.
pub struct Bar {
    bar: ProgressBar,
    label: String,
    tty: bool,
    quiet: bool,
    /// The current repetition's position and when it began (the ETA counts down from it).
    at: Option<(Position, Instant)>,
    /// The last line that can explain a skip (a skipped step's reason, or a note such as the
    /// series' stop), and how many steps skipped for it were not shown: a target that does
    /// not start, or a series stopped early, skips every step left with the same words.
    skips: Option<Skips>,
}

/// See [`Bar::skips`].
struct Skips {
    /// The line that gave the reason.
    line: String,
    /// Steps skipped for it since, not shown.
    unshown: usize,
    /// The line was a note (no skipped step was shown yet).
    from_note: bool,
}

impl Default for Bar {
    fn default() -> Self {
        Bar::new(false)
    }
}

impl Bar {
    /// A bar; `quiet` shows only the notes.
    pub fn new(quiet: bool) -> Self {
        let tty = super::shell::interactive_stderr() && !quiet;
        let target = if tty {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(0), target);
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        Bar {
            bar,
            label: String::new(),
            tty,
            quiet,
            at: None,
            skips: None,
        }
    }

    /// A line above the bar, after the count of repeated skips it ends.
    fn print(&mut self, line: String) {
        self.print_now_pending_skips();
        self.print_now(line);
    }

    fn print_now(&self, line: String) {
        if self.tty {
            self.bar.println(line);
        } else {
            eprintln!("{line}");
        }
    }

    /// The count of repeated skips not shown yet, if any.
    fn print_now_pending_skips(&mut self) {
        match self.skips.take() {
            Some(Skips { unshown: 0, .. }) | None => {}
            Some(Skips {
                unshown: n,
                from_note: true,
                ..
            }) => self.print_now(format!("    ... {n} step(s) skipped for that reason")),
            Some(Skips { unshown: n, .. }) => self.print_now(format!(
                "    ... and {n} more step(s) skipped for the same reason"
            )),
        }
    }

    /// True when `step` is skipped for the reason the last printed skip gave (it is counted).
    fn repeats_last_skip(&mut self, step: &StepResult) -> bool {
        if step.status != StepStatus::Skipped {
            return false;
        }
        let reason = step.reason.as_deref().unwrap_or("").trim_end();
        match &mut self.skips {
            Some(skips) if !reason.is_empty() && skips.line.ends_with(reason) => {
                skips.unshown += 1;
                true
            }
            _ => false,
        }
    }

    /// `step 7/20 (repetition 2/3), ETA 1m08s`: the time left counts down through the
    /// repetition.
    fn where_now(&self) -> String {
        match &self.at {
            Some((at, since)) => {
                let left = at.left.saturating_sub(since.elapsed());
                format!("{}, ETA {}", at.label(), show_duration(left))
            }
            None => String::new(),
        }
    }
}

impl Bar {
    /// A line above the bar (or on its own without one), e.g. `-v`'s per-second lines.
    pub fn line(&mut self, text: &str) {
        self.print(text.to_string());
    }
}

impl Progress for Bar {
    fn begin(&mut self, total: usize, done: usize) {
        self.bar.set_length(total as u64);
        self.bar.set_position(done as u64);
        self.bar.reset_eta();
    }
    fn at(&mut self, at: &Position) {
        self.at = Some((*at, Instant::now()));
        self.bar.set_position(at.step.saturating_sub(1) as u64);
        self.bar.set_prefix(self.where_now());
    }
    fn step(&mut self, label: &str) {
        self.label = label.to_string();
        self.bar.set_message(label.to_string());
    }
    fn live(&mut self, ops_per_s: f64) {
        self.bar.set_prefix(self.where_now());
        self.bar
            .set_message(format!("{}: {:.0} ops/s", self.label, ops_per_s));
    }
    fn done(&mut self, step: &StepResult) {
        let what = match (step.status, step.throughput_rps()) {
            (StepStatus::Ok, Some(t)) => format!("{t:.0} requests/s"),
            // The whole reason: a target's last output lines are the cause of its failure.
            (status, _) => format!(
                "{status:?}: {}",
                step.reason
                    .as_deref()
                    .unwrap_or("")
                    .trim_end()
                    .replace('\n', "\n    ")
            ),
        };
        if self.quiet {
            return;
        }
        // Once the repetition is over, the time left is the rest's.
        if let Some((at, since)) = &mut self.at {
            at.left = at.left.saturating_sub(since.elapsed());
            *since = Instant::now();
        }
        if self.repeats_last_skip(step) {
            return;
        }
        let line = format!(
            "[{}] {} {} c={}: {what}",
            self.where_now(),
            step.target,
            step.placement,
            step.clients
        );
        self.print(line);
        if step.status == StepStatus::Skipped {
            let line = step.reason.as_deref().unwrap_or("").trim_end().to_string();
            self.skips = Some(Skips {
                line,
                unshown: 0,
                from_note: false,
            });
        }
    }
    fn note(&mut self, text: &str) {
        self.print(format!("note: {text}"));
        self.skips = Some(Skips {
            line: text.trim_end().to_string(),
            unshown: 0,
            from_note: true,
        });
    }
    fn finish(&mut self) {
        self.print_now_pending_skips();
        if let Some(len) = self.bar.length() {
            self.bar.set_position(len);
        }
        self.bar.finish_and_clear();
    }
}

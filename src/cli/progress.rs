//! The progress bar of `stairbench run` and `demo`: step i of N, ETA, live ops/s (an
//! indicatif bar on a terminal, plain lines otherwise), behind the runner's
//! [`Progress`] trait.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::record::steps::{StepResult, StepStatus};
use crate::sweep::progress::Progress;

/// An indicatif bar on stderr; one line per step when stderr is not a terminal or `CI` is
/// set (no bar redrawn into a log); nothing but notes with `-q`.
pub struct Bar {
    bar: ProgressBar,
    label: String,
    tty: bool,
    quiet: bool,
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
            ProgressStyle::with_template("{pos}/{len} steps done [{bar:30}] ETA {eta} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        Bar {
            bar,
            label: String::new(),
            tty,
            quiet,
        }
    }
}

impl Bar {
    /// A line above the bar (or on its own without one), e.g. `-v`'s per-second lines.
    pub fn line(&mut self, text: &str) {
        if self.tty {
            self.bar.println(text);
        } else {
            eprintln!("{text}");
        }
    }
}

impl Progress for Bar {
    fn begin(&mut self, total: usize, done: usize) {
        self.bar.set_length(total as u64);
        self.bar.set_position(done as u64);
        self.bar.reset_eta();
    }
    fn step(&mut self, label: &str) {
        self.label = label.to_string();
        self.bar.set_message(label.to_string());
    }
    fn live(&mut self, ops_per_s: f64) {
        self.bar
            .set_message(format!("{}: {:.0} ops/s", self.label, ops_per_s));
    }
    fn done(&mut self, step: &StepResult) {
        self.bar.inc(1);
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
        let line = format!(
            "{} {} c={} rep {}: {what}",
            step.target, step.placement, step.clients, step.rep
        );
        if self.tty {
            self.bar.println(line);
        } else {
            eprintln!(
                "[{}/{}] {line}",
                self.bar.position(),
                self.bar.length().unwrap_or(0)
            );
        }
    }
    fn note(&mut self, text: &str) {
        if self.tty {
            self.bar.println(format!("note: {text}"));
        } else {
            eprintln!("note: {text}");
        }
    }
    fn finish(&mut self) {
        self.bar.finish_and_clear();
    }
}

//! Progress on stderr for every long stage: bars with counts and an ETA
//! where the work is counted (tracing, measuring, scoring), a spinner with
//! the elapsed time where it is not (loading a model).
//!
//! indicatif draws only when stderr is a terminal, so a log file or a CI
//! job gets no bar and no escape code; `vauban -q` hides them on a
//! terminal too ([`hide`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

static HIDDEN: AtomicBool = AtomicBool::new(false);

/// Hides every bar and spinner made from now on (`-q`).
pub fn hide() {
    HIDDEN.store(true, Ordering::SeqCst);
}

fn hidden() -> bool {
    HIDDEN.load(Ordering::SeqCst)
}

/// A bar of `len` steps labelled `what`: position, length, elapsed time
/// and the estimated time left.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    if hidden() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>10} {bar:30} {pos}/{len} [{elapsed} elapsed, {eta} left]",
        )
        .expect("a valid template"),
    );
    bar.set_message(what.to_owned());
    bar
}

/// A spinner labelled `what`, with the elapsed time, for work that has no
/// count (loading a model); it ticks on its own.
pub fn spinner(what: &str) -> ProgressBar {
    if hidden() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("a valid template"),
    );
    bar.set_message(what.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_bars_draw_nothing() {
        // Not a terminal under the test harness: indicatif hides it too,
        // so only the count is checked here; `hide` is checked through the
        // binary (no progress output with -q).
        let b = bar(3, "x");
        b.inc(2);
        assert_eq!(b.position(), 2);
        hide();
        assert!(bar(3, "x").is_hidden() && spinner("y").is_hidden());
    }
}

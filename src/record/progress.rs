//! The live status line while recording on a terminal: elapsed/duration, samples, lost, MB written.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

pub struct Progress {
    bar: Option<ProgressBar>,
    duration: Option<Duration>,
}

impl Progress {
    /// `enabled` only on a terminal; otherwise every call is a no-op.
    pub fn new(enabled: bool, duration: Option<Duration>) -> Self {
        let bar = enabled.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg}").unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar
        });
        Progress { bar, duration }
    }

    pub fn update(&self, elapsed: Duration, samples: u64, lost: u64, bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.set_message(status_line(elapsed, self.duration, samples, lost, bytes));
            bar.tick();
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

pub fn status_line(elapsed: Duration, duration: Option<Duration>, samples: u64, lost: u64, bytes: u64) -> String {
    let time = match duration {
        Some(d) => format!("{:.1}/{:.1} s", elapsed.as_secs_f64(), d.as_secs_f64()),
        None => format!("{:.1} s", elapsed.as_secs_f64()),
    };
    format!("recording {time}  {samples} samples  {lost} lost  {:.1} MB", bytes as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_line_shows_progress_and_counts() {
        let s = status_line(Duration::from_millis(2500), Some(Duration::from_secs(10)), 250, 3, 1_500_000);
        assert_eq!(s, "recording 2.5/10.0 s  250 samples  3 lost  1.5 MB");
        Progress::new(false, None).update(Duration::ZERO, 0, 0, 0);
    }
}

//! `metadata.txt`: what was profiled, where and how, so an archive explains itself and `postprocess` can title
//! its flame graph. Format: UTF-8 text, one `key: value` per line, `#` starts a comment line; a value is one line
//! (a newline in it is written `\n`, a backslash `\\`). Keys, in the order written:
//!
//! | key | value |
//! |---|---|
//! | `host` | host name of the machine that recorded |
//! | `kernel` | kernel release (`uname -r`) |
//! | `pid` | host PID of the target (absent for `-all`) |
//! | `ns_pid` | the target's PID in its own PID namespace (e.g. 1 in a container) |
//! | `comm` | the target's command name |
//! | `command_line` | the target's command line, arguments shell-quoted where needed |
//! | `start_time` | when sampling started, RFC 3339 with offset |
//! | `duration_secs` | seconds sampled |
//! | `frequency_hz` | samples per second per CPU asked for |
//! | `mode` | what was measured: `cpu`, `offcpu` or `wall` (as `collect -mode`; postprocess writes what the recording holds) |
//! | `event` | the sampling event (`cpu-clock`); events joined by `,` when there are several |
//! | `samples` | samples recorded (switch-outs included) |
//! | `switch_outs` | of those, switch-outs (`sched:sched_switch` samples), in the off-CPU modes |
//! | `lost` | samples the kernel dropped |
//! | `jit_names` | where each .NET process's JIT names came from: `PID N: perf map on already (…)`, `… switched on over the .NET diagnostics IPC for the run, off again after`, `… set in its environment by profcpu`, `none: <why and how to get them>`, or `left alone (-no-ipc)`; entries joined by `; ` |
//! | `profcpu_version` | version of profcpu that recorded |
//! | `trigger` | what started a `profcpu trap` collection: `cpu-above` or `cpu-below` (absent for `collect`) |
//! | `trigger_threshold_pct` | the threshold, percent of one CPU (200 = two cores) |
//! | `trigger_for_secs` | how long the condition had to hold |
//! | `trigger_scope` | `process` (the process and its threads) or `cgroup` (its cgroup: the container) |
//! | `trigger_source` | the file the CPU use was read from (`/proc/PID/stat`, a cgroup's `cpu.stat`) |
//! | `trigger_cpu_pct` | the CPU use measured while the condition held (average over `trigger_for_secs`) |
//! | `trigger_time` | when the condition had held long enough and the collection started, RFC 3339 |
//! | `trigger_collection` | which collection of the trap this is: `N of COUNT` |
//!
//! Absent values are left out; the `trigger` keys come all or none. Unknown keys are kept (in [`Metadata::extra`])
//! and written back.

use anyhow::{bail, Context, Result};
use chrono::{DateTime, FixedOffset};
use std::fmt;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata {
    pub host: String,
    pub kernel: String,
    pub pid: Option<u32>,
    pub ns_pid: Option<u32>,
    pub comm: String,
    pub command_line: String,
    pub start_time: Option<DateTime<FixedOffset>>,
    pub duration_secs: Option<f64>,
    pub frequency_hz: Option<u64>,
    /// `cpu`, `offcpu`, `wall`; empty when unknown (a metadata.txt written before modes existed).
    pub mode: String,
    pub event: String,
    pub samples: u64,
    pub switch_outs: Option<u64>,
    pub lost: u64,
    /// Where JIT names came from (see the table above); empty when no .NET process was met.
    pub jit_names: String,
    pub profcpu_version: String,
    /// What started the collection, for one `profcpu trap` made.
    pub trigger: Option<Trigger>,
    /// Keys this version does not know, in file order.
    pub extra: Vec<(String, String)>,
}

/// The CPU condition that started a `profcpu trap` collection (the `trigger*` keys).
#[derive(Debug, Clone, PartialEq)]
pub struct Trigger {
    /// `cpu-above` or `cpu-below`, as the flag is spelled.
    pub condition: String,
    pub threshold_pct: f64,
    pub for_secs: f64,
    /// `process` or `cgroup`.
    pub scope: String,
    pub source: String,
    pub cpu_pct: f64,
    pub time: DateTime<FixedOffset>,
    /// This collection's number (from 1) and how many the trap was to make.
    pub collection: u32,
    pub count: u32,
}

impl Trigger {
    /// `CPU 183% above 50% for 3 s (process)`, for titles and messages.
    pub fn summary(&self) -> String {
        let relation = self.condition.strip_prefix("cpu-").unwrap_or(&self.condition);
        format!(
            "CPU {:.0}% {relation} {}% for {} s ({})",
            self.cpu_pct,
            number(self.threshold_pct),
            number(self.for_secs),
            self.scope
        )
    }
}

/// `50`, `12.5`: a user's number as they would have typed it.
fn number(v: f64) -> String {
    let text = format!("{v:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The `trigger*` keys as they are read, put together once the whole file is.
#[derive(Default)]
struct TriggerKeys {
    condition: Option<String>,
    threshold_pct: Option<f64>,
    for_secs: Option<f64>,
    scope: Option<String>,
    source: Option<String>,
    cpu_pct: Option<f64>,
    time: Option<DateTime<FixedOffset>>,
    collection: Option<(u32, u32)>,
    first_line: Option<usize>,
}

impl TriggerKeys {
    fn finish(self, origin: &str) -> Result<Option<Trigger>> {
        let Some(line) = self.first_line else { return Ok(None) };
        let missing = |key: &str| anyhow::anyhow!("{origin} line {line}: the trigger keys lack {key}");
        let (collection, count) = self.collection.ok_or_else(|| missing("trigger_collection"))?;
        Ok(Some(Trigger {
            condition: self.condition.ok_or_else(|| missing("trigger"))?,
            threshold_pct: self.threshold_pct.ok_or_else(|| missing("trigger_threshold_pct"))?,
            for_secs: self.for_secs.ok_or_else(|| missing("trigger_for_secs"))?,
            scope: self.scope.ok_or_else(|| missing("trigger_scope"))?,
            source: self.source.ok_or_else(|| missing("trigger_source"))?,
            cpu_pct: self.cpu_pct.ok_or_else(|| missing("trigger_cpu_pct"))?,
            time: self.time.ok_or_else(|| missing("trigger_time"))?,
            collection,
            count,
        }))
    }
}

impl Metadata {
    /// Host name, kernel release and profcpu version of this machine and build; the rest empty.
    pub fn for_this_host() -> Self {
        let (host, kernel) = match nix::sys::utsname::uname() {
            Ok(u) => (u.nodename().to_string_lossy().into_owned(), u.release().to_string_lossy().into_owned()),
            Err(_) => (String::new(), String::new()),
        };
        Metadata { host, kernel, profcpu_version: env!("CARGO_PKG_VERSION").to_string(), ..Metadata::default() }
    }

    /// Parses a metadata file's text. `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self> {
        let mut meta = Metadata::default();
        let mut trigger = TriggerKeys::default();
        for (index, line) in text.lines().enumerate() {
            let line_no = index + 1;
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once(':') else {
                bail!("{origin} line {line_no}: expected `key: value`, got {line:?}");
            };
            let key = key.trim();
            let value = unescape(value.strip_prefix(' ').unwrap_or(value));
            let number = |what: &str| -> Result<u64> {
                value.trim().parse::<u64>().with_context(|| {
                    format!("{origin} line {line_no}: {key} must be a whole number ({what}), got {value:?}")
                })
            };
            let real = |what: &str| -> Result<f64> {
                let v = value.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0);
                v.with_context(|| format!("{origin} line {line_no}: {key} must be a number ({what}), got {value:?}"))
            };
            let time = || {
                DateTime::parse_from_rfc3339(value.trim()).with_context(|| {
                    format!(
                        "{origin} line {line_no}: {key} must be RFC 3339 (2026-11-22T14:03:22+01:00), got {value:?}"
                    )
                })
            };
            if key.starts_with("trigger") {
                trigger.first_line.get_or_insert(line_no);
            }
            match key {
                "host" => meta.host = value,
                "kernel" => meta.kernel = value,
                "pid" => meta.pid = Some(number("a PID")?.try_into().context("PID out of range")?),
                "ns_pid" => meta.ns_pid = Some(number("a PID")?.try_into().context("PID out of range")?),
                "comm" => meta.comm = value,
                "command_line" => meta.command_line = value,
                "start_time" => meta.start_time = Some(time()?),
                "duration_secs" => {
                    let secs = value.trim().parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0);
                    meta.duration_secs = Some(secs.with_context(|| {
                        format!("{origin} line {line_no}: duration_secs must be a number of seconds, got {value:?}")
                    })?)
                }
                "frequency_hz" => meta.frequency_hz = Some(number("samples per second")?),
                "mode" => meta.mode = value,
                "event" => meta.event = value,
                "samples" => meta.samples = number("a count")?,
                "switch_outs" => meta.switch_outs = Some(number("a count")?),
                "lost" => meta.lost = number("a count")?,
                "jit_names" => meta.jit_names = value,
                "profcpu_version" => meta.profcpu_version = value,
                "trigger" => trigger.condition = Some(value),
                "trigger_threshold_pct" => trigger.threshold_pct = Some(real("percent of one CPU")?),
                "trigger_for_secs" => trigger.for_secs = Some(real("seconds")?),
                "trigger_scope" => trigger.scope = Some(value),
                "trigger_source" => trigger.source = Some(value),
                "trigger_cpu_pct" => trigger.cpu_pct = Some(real("percent of one CPU")?),
                "trigger_time" => trigger.time = Some(time()?),
                "trigger_collection" => {
                    let parsed = value.split_once(" of ").and_then(|(n, of)| Some((n.parse().ok()?, of.parse().ok()?)));
                    trigger.collection = Some(parsed.with_context(|| {
                        format!("{origin} line {line_no}: trigger_collection must be `N of COUNT`, got {value:?}")
                    })?)
                }
                _ => meta.extra.push((key.to_string(), value)),
            }
        }
        meta.trigger = trigger.finish(origin)?;
        Ok(meta)
    }

    /// Joins a command line for `command_line`, quoting arguments the way a POSIX shell would need them.
    pub fn quote_command_line<S: AsRef<str>>(args: &[S]) -> String {
        let quoted: Vec<String> = args
            .iter()
            .map(|arg| {
                let arg = arg.as_ref();
                let plain = !arg.is_empty() && arg.chars().all(|c| c.is_alphanumeric() || "-_./=:,+@%".contains(c));
                if plain {
                    arg.to_string()
                } else {
                    format!("'{}'", arg.replace('\'', r"'\''"))
                }
            })
            .collect();
        quoted.join(" ")
    }
}

impl fmt::Display for Metadata {
    /// The file's text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "# profcpu profile metadata: one `key: value` per line")?;
        let mut line = |key: &str, value: &str| writeln!(f, "{key}: {}", escape(value));
        line("host", &self.host)?;
        line("kernel", &self.kernel)?;
        if let Some(pid) = self.pid {
            line("pid", &pid.to_string())?;
        }
        if let Some(ns_pid) = self.ns_pid {
            line("ns_pid", &ns_pid.to_string())?;
        }
        line("comm", &self.comm)?;
        line("command_line", &self.command_line)?;
        if let Some(start) = self.start_time {
            line("start_time", &start.to_rfc3339())?;
        }
        if let Some(duration) = self.duration_secs {
            line("duration_secs", &format!("{duration:.3}"))?;
        }
        if let Some(freq) = self.frequency_hz {
            line("frequency_hz", &freq.to_string())?;
        }
        if !self.mode.is_empty() {
            line("mode", &self.mode)?;
        }
        line("event", &self.event)?;
        line("samples", &self.samples.to_string())?;
        if let Some(n) = self.switch_outs {
            line("switch_outs", &n.to_string())?;
        }
        line("lost", &self.lost.to_string())?;
        if !self.jit_names.is_empty() {
            line("jit_names", &self.jit_names)?;
        }
        line("profcpu_version", &self.profcpu_version)?;
        if let Some(t) = &self.trigger {
            line("trigger", &t.condition)?;
            line("trigger_threshold_pct", &number(t.threshold_pct))?;
            line("trigger_for_secs", &number(t.for_secs))?;
            line("trigger_scope", &t.scope)?;
            line("trigger_source", &t.source)?;
            line("trigger_cpu_pct", &format!("{:.1}", t.cpu_pct))?;
            line("trigger_time", &t.time.to_rfc3339())?;
            line("trigger_collection", &format!("{} of {}", t.collection, t.count))?;
        }
        for (key, value) in &self.extra {
            line(key, value)?;
        }
        Ok(())
    }
}

fn escape(value: &str) -> String {
    value.replace('\\', r"\\").replace('\n', r"\n").replace('\r', r"\r")
}

fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_awkward_values() {
        let meta = Metadata {
            host: "box".into(),
            kernel: "6.18.0".into(),
            pid: Some(4242),
            ns_pid: Some(1),
            comm: "dotnet".into(),
            command_line: Metadata::quote_command_line(&["dotnet", "App.dll", "--name", "it's a\nline"]),
            start_time: Some(DateTime::parse_from_rfc3339("2026-11-22T14:03:22.5+01:00").unwrap()),
            duration_secs: Some(10.25),
            frequency_hz: Some(99),
            mode: "wall".into(),
            event: "cpu-clock,sched:sched_switch".into(),
            samples: 2030,
            switch_outs: Some(1000),
            lost: 3,
            jit_names: "PID 4242: perf map switched on over the .NET diagnostics IPC for the run, off again after"
                .into(),
            profcpu_version: "0.1.0".into(),
            trigger: None,
            extra: vec![("future_key".into(), "a: b \\ c".into())],
        };
        let text = meta.to_string();
        assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 17, "{text}");
        assert_eq!(Metadata::parse(&text, "metadata.txt").unwrap(), meta);
        let trigger = Trigger {
            condition: "cpu-above".into(),
            threshold_pct: 12.5,
            for_secs: 3.0,
            scope: "cgroup".into(),
            source: "/sys/fs/cgroup/unified/x/cpu.stat".into(),
            cpu_pct: 183.4,
            time: DateTime::parse_from_rfc3339("2026-11-22T14:03:25.25+01:00").unwrap(),
            collection: 2,
            count: 3,
        };
        let triggered = Metadata { trigger: Some(trigger.clone()), ..meta.clone() };
        let text = triggered.to_string();
        assert!(text.contains("\ntrigger_threshold_pct: 12.5\ntrigger_for_secs: 3\n"), "{text}");
        assert!(text.contains("\ntrigger_collection: 2 of 3\n"), "{text}");
        assert_eq!(Metadata::parse(&text, "metadata.txt").unwrap(), triggered);
        assert_eq!(trigger.summary(), "CPU 183% above 12.5% for 3 s (cgroup)");
        assert_eq!(meta.command_line, "dotnet App.dll --name 'it'\\''s a\nline'");
    }

    #[test]
    fn bad_lines_name_the_line_and_key() {
        let err = Metadata::parse("host: a\npid: twelve\n", "metadata.txt").unwrap_err().to_string();
        assert!(err.contains("metadata.txt line 2: pid must be a whole number"), "{err}");
        let err = Metadata::parse("no colon here\n", "m").unwrap_err().to_string();
        assert!(err.contains("m line 1: expected `key: value`"), "{err}");
        let meta = Metadata::parse("# comment\n\nsamples: 5\n", "m").unwrap();
        assert_eq!((meta.samples, meta.pid), (5, None));
        let err = Metadata::parse("host: a\ntrigger: cpu-above\ntrigger_cpu_pct: 80\n", "m").unwrap_err().to_string();
        assert!(err.contains("m line 2: the trigger keys lack trigger_collection"), "{err}");
        let err = Metadata::parse("trigger_cpu_pct: lots\n", "m").unwrap_err().to_string();
        assert!(err.contains("m line 1: trigger_cpu_pct must be a number"), "{err}");
    }
}

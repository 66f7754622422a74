//! Command-line interface: every flag is defined and documented once here. Long flags are accepted with one dash
//! (`-pid 1`, as perfcollect and the original profcpu take them) as well as two (`--pid 1`, `--pid=1`).

use crate::record::{CallGraph, EventKind, Mode};
use clap::{ArgGroup, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;

const COLLECT_EXAMPLES: &str = "\
Examples:
  # sample PID 1 (the app, seen from a sidecar or inside its container) for 10 s
  profcpu collect -pid 1 -duration 10
  # 999 Hz until Ctrl+C or 30 s; GNU-style flags work as well
  profcpu collect --pid 4242 --freq=999
  # every process on the machine
  profcpu collect -all -duration 5
  # launch a command and sample it until it exits (at most 20 s)
  profcpu collect -duration 20 -- dotnet App.dll
  # where the threads wait: off-CPU stacks weighted by blocked time (µs)
  profcpu collect -pid 1 -duration 10 -mode offcpu
  # on- and off-CPU time in one graph; one graph per thread with postprocess -per-thread
  profcpu collect -pid 1 -duration 10 -mode wall
  # name the .NET runtime's own frames (libcoreclr.so) with debug files fetched by build-id
  profcpu collect -pid 1 -symbol-server https://msdl.microsoft.com/download/symbols

.NET 8 and later need no preparation: profcpu switches the running app's perf map on over
its diagnostics socket for the run and off again afterwards, removing the files it made
(-no-ipc leaves the runtime alone). Older runtimes (.NET Core 3.1, .NET 5-7) must be started
with DOTNET_PerfMapEnabled=1 (COMPlus_PerfMapEnabled=1 on 3.1); a launched command gets it
set. Each run writes <output>/HH-MM-SS_YYYY-MM-DD/ with perf.data, perf_script.out,
folded_stacks.out, flamegraph.svg and prof.tar.gz, and prints that folder as the last line
of its output.";

const TRAP_EXAMPLES: &str = "\
Examples:
  # a runaway loop: profile PID 1 for 20 s once it has used more than 1.5 cores for 5 s
  profcpu trap -pid 1 -cpu-above 150 -for 5 -duration 20
  # the whole container (its cgroup, as docker stats counts it) above 80% of one core,
  # up to 3 collections at least 10 minutes apart, giving up after a day
  profcpu trap -pid 1 -scope cgroup -cpu-above 80 -count 3 -cooldown 600 -timeout 86400
  # thread starvation or a stalled service: CPU falls below 5% for 10 s while requests
  # wait; off-CPU mode shows where the threads are blocked
  profcpu trap -pid 1 -cpu-below 5 -for 10 -mode offcpu -duration 15

CPU use is percent of one CPU as top and docker stats show it (200 = two cores busy),
read every 0.25 s from /proc/PID/stat (-scope process: the process and all its threads,
not its child processes) or from its cgroup's cpu.stat / cpuacct.usage (-scope cgroup:
the whole container), each time over the last second, as top refreshing every second
shows it. The condition holds for -for seconds when every such reading in that time met
it; after a collection it must hold anew once -cooldown is over.

Each collection is `profcpu collect -pid PID` with the collect options given (-duration,
-freq, -output, ...): its own <output>/HH-MM-SS_YYYY-MM-DD/, the trigger in metadata.txt,
the folder printed on stdout when complete. On a terminal a live line shows the CPU and
the state; otherwise one line per change of state. Ctrl+C or SIGTERM ends the trap (a
collection in progress still writes every output). Exit status: 0 when something was
collected; otherwise 1 (the target exited, -timeout passed, an error) or 130/143 for
SIGINT/SIGTERM.";

const POSTPROCESS_EXAMPLES: &str = "\
Examples:
  # regenerate every output of a collection (offline: names come from its symbols/)
  profcpu postprocess -dir profilings/14-03-22_2026-11-22
  # an archive copied from elsewhere; merge JIT tiers and hide kernel frames
  profcpu postprocess -dir prof.tar.gz -strip-tiers -no-kernel
  # a directory holding a perf.data from `perf record -g` (and perf-PID.map files)
  profcpu postprocess -dir ./perf-record-output -per-thread
  # name what the collection left unnamed in the .NET runtime, from Microsoft's symbol server
  profcpu postprocess -dir profilings/14-03-22_2026-11-22 -symbol-server https://msdl.microsoft.com/download/symbols";

#[derive(Debug, Parser)]
#[command(
    name = "profcpu",
    version,
    about = "CPU profiler for Linux and JIT runtimes (.NET, Node.js), in and across containers",
    after_help = "Run 'profcpu <command> --help' (collect, trap, postprocess, probe, offsets) for examples.\n\
                  Logs: -v (info), -vv (debug), or RUST_LOG=profcpu=debug."
)]
pub struct Cli {
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Sample a process (or the whole machine, or a command) and write perf.data, flame graph and friends.
    #[command(after_help = COLLECT_EXAMPLES)]
    Collect(CollectArgs),
    /// Watch a process's CPU use and collect (as `collect` does) when it crosses a threshold.
    #[command(after_help = TRAP_EXAMPLES)]
    Trap(TrapArgs),
    /// Regenerate perf_script.out, folded_stacks.out, flamegraph.svg and prof.tar.gz from saved data, offline.
    #[command(after_help = POSTPROCESS_EXAMPLES)]
    Postprocess(PostprocessArgs),
    /// Count every call of methods (.NET JIT or ReadyToRun, native functions) and record who calls them.
    #[command(after_help = PROBE_EXAMPLES)]
    Probe(ProbeArgs),
    /// List the file offsets of the methods in a process's ReadyToRun and ELF images, for perf probe or bpftrace.
    #[command(after_help = OFFSETS_EXAMPLES)]
    Offsets(OffsetsArgs),
}

const PROBE_EXAMPLES: &str = "\
Examples:
  # count calls of a .NET method in PID 4242 for 10 s, with the callers' flame graph
  profcpu probe -pid 4242 -method 'MyApp.Books::Reconcile' -duration 10
  # several patterns (substring or glob), counting only
  profcpu probe -pid 4242 -method '*Reconcile*' 'System.Convert::ToBase64String' -no-stacks
  # a native function of a command, from its first instruction until it exits
  profcpu probe -method compress_block -- ./encoder input.bin

A PATTERN is matched against method names as profcpu names frames, e.g.
`int64 [App] MyApp.Books::Reconcile(int32)`: the exact `Namespace.Type::Method`, else a
substring, or a glob (* ? [..]). JIT methods are found once compiled (called at least once);
a .NET 8+ app started without DOTNET_PerfMapEnabled gets its perf map switched on for the run.
File-backed code (ReadyToRun .dll, ELF) is probed with uprobes; a .NET method's JIT code, whatever
its tier, with a hardware watchpoint on its entry stub (virtual methods, other JITs: a hardware
breakpoint on the newest code) — x86-64 has 4 debug registers, so at most 4 JIT methods at once.
stdout: one line `<calls> <method>` per method, most called first, then the output folder
(perf.data, folded_stacks.out, flamegraph.svg of the callers, metadata.txt, prof.tar.gz).";

const OFFSETS_EXAMPLES: &str = "\
Examples:
  # every method of CoreLib in PID 4242, then a uprobe on one with perf
  profcpu offsets -pid 4242 -image System.Private.CoreLib.dll | grep 'Convert::ToBase64String'
  perf probe -x /path/to/System.Private.CoreLib.dll --add 0x144690

Each line is `0xOFFSET IMAGE-PATH METHOD`: the file offset of the method's first instruction
in the image (ReadyToRun .dll or ELF file) the process maps, with a path that reaches the
file from here (through /proc/PID/root for a process in a container).";

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Process whose calls to count (host PID, or the PID as seen from this container).
    #[arg(long, value_name = "PID", default_value_t = 1, conflicts_with = "command", value_parser = parse_pid, allow_negative_numbers = true)]
    pub pid: u32,

    /// Methods to probe: an exact `Namespace.Type::Method`, a substring or a glob; several may follow.
    #[arg(long = "method", value_name = "PATTERN", required = true, num_args = 1..)]
    pub methods: Vec<String>,

    /// Seconds to probe (fractions allowed). Ctrl+C or SIGTERM stops early and still writes every output.
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = parse_duration, allow_negative_numbers = true)]
    pub duration: f64,

    /// Record the callers' stack of every call (the default).
    #[arg(long, conflicts_with = "no_stacks")]
    pub stacks: bool,

    /// Count calls only: no stacks, no flame graph (cheaper per call).
    #[arg(long)]
    pub no_stacks: bool,

    /// How callers' stacks are recorded: fp (frame pointers: cheapest, the default), auto (plus an 8 KB stack copy
    /// per call, for callers in code without frame pointers) or dwarf (32 KB).
    #[arg(long, value_name = "MODE", default_value = "fp", value_parser = call_graph_parser())]
    pub call_graph: CallGraph,

    /// Base folder; each run writes into a new <base>/HH-MM-SS_YYYY-MM-DD inside it.
    #[arg(long, value_name = "DIR", default_value = "profilings")]
    pub output: PathBuf,

    /// Ring-buffer data pages per CPU (power of two, 1 to 1024).
    #[arg(long, value_name = "PAGES", value_parser = parse_pages)]
    pub mmap_pages: Option<usize>,

    #[command(flatten)]
    pub symbols: SymbolArgs,

    /// Command to launch and probe until it exits (after `--`).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct OffsetsArgs {
    /// Process whose images to list (host PID, or the PID as seen from this container).
    #[arg(long, value_name = "PID", default_value_t = 1, value_parser = parse_pid, allow_negative_numbers = true)]
    pub pid: u32,

    /// Only images whose path ends with, or whose file name contains, NAME (e.g. System.Private.CoreLib.dll).
    #[arg(long, value_name = "NAME")]
    pub image: Option<String>,

    #[command(flatten)]
    pub symbols: SymbolArgs,
}

#[derive(Debug, Args)]
pub struct CollectArgs {
    /// Process to sample (host PID, or the PID as seen from this container); all its threads, also later ones.
    #[arg(long, value_name = "PID", default_value_t = 1, conflicts_with_all = ["all", "command"], value_parser = parse_pid, allow_negative_numbers = true)]
    pub pid: u32,

    /// Sample every process on the machine (needs CAP_PERFMON/CAP_SYS_ADMIN or perf_event_paranoid <= 0).
    #[arg(long, conflicts_with = "command")]
    pub all: bool,

    #[command(flatten)]
    pub options: CollectOptions,

    /// Command to launch and profile until it exits (after `--`).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// How one collection records and where it writes: everything of `collect` but the choice of target, so that
/// every command that collects (collect itself, trap) offers the same flags.
#[derive(Debug, Args, Clone)]
pub struct CollectOptions {
    /// What to measure: cpu (where threads run: samples on the CPU), offcpu (where they wait: the stack of every
    /// switch-out, weighted by the time until the thread ran again) or wall (both in one time unit, so each
    /// thread's total is the run's duration).
    #[arg(long, value_name = "MODE", default_value = "cpu", value_parser = mode_parser())]
    pub mode: Mode,

    /// The same as `-mode offcpu` (perfcollect's spelling).
    #[arg(long, conflicts_with = "mode")]
    pub offcpu: bool,

    /// Seconds to sample (fractions allowed). Ctrl+C or SIGTERM stops early and still writes every output.
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = parse_duration, allow_negative_numbers = true)]
    pub duration: f64,

    /// Samples per second per CPU.
    #[arg(long, value_name = "HZ", default_value_t = 99, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub freq: u64,

    /// Base folder; each run writes into a new <base>/HH-MM-SS_YYYY-MM-DD inside it.
    #[arg(long, value_name = "DIR", default_value = "profilings")]
    pub output: PathBuf,

    /// What drives sampling (cycles falls back to cpu-clock without a hardware PMU).
    #[arg(long, value_name = "EVENT", default_value = "cpu-clock", value_parser = event_parser())]
    pub event: EventKind,

    /// How stacks are recorded: auto (frame pointers plus an 8 KB user stack copy per sample, unwound with the
    /// files' call frame information where frame pointers are missing, e.g. in libc), fp (frame pointers only:
    /// smallest perf.data) or dwarf (a 32 KB stack copy, for deep native stacks).
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = call_graph_parser())]
    pub call_graph: CallGraph,

    /// Keep the stack copies in perf.data (for perf's own unwinder, or to unwind them again later). By default an
    /// on-CPU collection writes perf.data again with each copy replaced by the callchain profcpu unwound from it:
    /// about a thirtieth of the size, and `perf report` shows the same whole stacks (-mode offcpu and wall keep
    /// the copies).
    #[arg(long)]
    pub keep_stack_copies: bool,

    /// Ring-buffer data pages per CPU (power of two, 1 to 1024). Default: as large as perf_event_mlock_kb allows,
    /// up to 512.
    #[arg(long, value_name = "PAGES", value_parser = parse_pages)]
    pub mmap_pages: Option<usize>,

    /// Leave .NET runtimes as they are: do not switch a .NET 8+ app's perf map on over its diagnostics socket for
    /// the run (and do not add DOTNET_PerfMapEnabled=1 to a launched command's environment).
    #[arg(long)]
    pub no_ipc: bool,

    #[command(flatten)]
    pub symbols: SymbolArgs,
}

impl CollectOptions {
    /// The mode asked for, `-offcpu` included.
    pub fn mode(&self) -> Mode {
        if self.offcpu {
            Mode::Offcpu
        } else {
            self.mode
        }
    }
}

/// `profcpu trap`: when to collect; how is [`CollectOptions`].
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("condition").required(true).args(["cpu_above", "cpu_below"])))]
pub struct TrapArgs {
    /// Process to watch and sample (host PID, or the PID as seen from this container); all its threads.
    #[arg(long, value_name = "PID", default_value_t = 1, value_parser = parse_pid, allow_negative_numbers = true)]
    pub pid: u32,

    /// Collect when CPU use is above PCT percent of one CPU (200 = two cores busy).
    #[arg(long, value_name = "PCT", value_parser = parse_percent, allow_negative_numbers = true)]
    pub cpu_above: Option<f64>,

    /// Collect when CPU use is below PCT percent of one CPU (a stalled or starved service).
    #[arg(long, value_name = "PCT", value_parser = parse_percent, allow_negative_numbers = true)]
    pub cpu_below: Option<f64>,

    /// Seconds the condition must hold (every reading of the CPU use over the last second meeting it) before a
    /// collection starts; 0: at the first reading that meets it.
    #[arg(long = "for", value_name = "SECS", default_value = "3", value_parser = parse_wait, allow_negative_numbers = true)]
    pub hold: f64,

    /// Collections to make before ending.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub count: u32,

    /// Seconds to wait after a collection before watching again.
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = parse_wait, allow_negative_numbers = true)]
    pub cooldown: f64,

    /// End after this many seconds even if fewer than -count collections were made (a collection in progress
    /// finishes). Default: no limit.
    #[arg(long, value_name = "SECS", value_parser = parse_duration, allow_negative_numbers = true)]
    pub timeout: Option<f64>,

    /// What CPU use is measured: the process with all its threads, or its whole cgroup (the container, as docker
    /// stats counts it). The collection samples the process either way.
    #[arg(long, value_name = "SCOPE", value_enum, default_value_t = Scope::Process)]
    pub scope: Scope,

    #[command(flatten)]
    pub options: CollectOptions,
}

/// What `trap` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scope {
    Process,
    Cgroup,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Process => "process",
            Scope::Cgroup => "cgroup",
        }
    }
}

/// Flags shared by everything that names frames.
#[derive(Debug, Args, Clone)]
pub struct SymbolArgs {
    /// Extra folder to search for debug files (like /usr/lib/debug); may be repeated.
    #[arg(long, value_name = "DIR")]
    pub symbols: Vec<PathBuf>,

    /// Use perf maps and jitdumps even when owned by a user other than root or the target's (they could lie).
    #[arg(long)]
    pub force_maps: bool,

    /// Fetch missing debug files (e.g. libcoreclr.so.dbg of a stripped .NET runtime) by build-id from this symbol
    /// server, asked in Microsoft's SSQP layout, then debuginfod's; may be repeated. Nothing is fetched without it.
    /// Downloads are verified and cached in $XDG_CACHE_HOME/profcpu/symbols (else ~/.cache/profcpu/symbols).
    #[arg(long = "symbol-server", value_name = "URL")]
    pub symbol_servers: Vec<String>,

    /// Also ask the debuginfod servers listed in DEBUGINFOD_URLS (not asked otherwise, even when it is set).
    #[arg(long)]
    pub debuginfod: bool,

    /// Seconds a symbol server may take to connect, to answer, or stall while sending, before it is given up.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_duration)]
    pub symbol_timeout: f64,
}

#[derive(Debug, Args)]
pub struct PostprocessArgs {
    /// A profcpu output directory, a prof.tar.gz, or a directory with a perf.data from `perf record -g`.
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,

    /// Keep only samples of this process (host PID as recorded).
    #[arg(long, value_name = "PID", value_parser = parse_pid)]
    pub pid: Option<u32>,

    /// Keep only samples of this thread.
    #[arg(long, value_name = "TID", value_parser = parse_pid)]
    pub tid: Option<u32>,

    /// Also write one folded file and flame graph per thread (folded_stacks.<tid>.out, flamegraph.<tid>.svg).
    #[arg(long)]
    pub per_thread: bool,

    /// Drop kernel frames.
    #[arg(long)]
    pub no_kernel: bool,

    /// Drop JIT tier suffixes such as [OptimizedTier1] so one method's tiers merge.
    #[arg(long)]
    pub strip_tiers: bool,

    /// Flame graph title.
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,

    /// Use only the kernel's frame-pointer callchains, not the samples' stack copies (to compare the two).
    #[arg(long, hide = true)]
    pub ignore_stack_copies: bool,

    #[command(flatten)]
    pub symbols: SymbolArgs,
}

/// The events record knows, offered by name (so `--help` and errors list them).
fn event_parser() -> impl clap::builder::TypedValueParser<Value = EventKind> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(EventKind::ALL.map(EventKind::name))
        .map(|name| EventKind::from_name(&name).expect("only the names of EventKind::ALL are possible"))
}

fn mode_parser() -> impl clap::builder::TypedValueParser<Value = Mode> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Mode::ALL.map(Mode::name))
        .map(|name| Mode::from_name(&name).expect("only the names of Mode::ALL are possible"))
}

fn call_graph_parser() -> impl clap::builder::TypedValueParser<Value = CallGraph> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(CallGraph::ALL.map(CallGraph::name))
        .map(|name| CallGraph::from_name(&name).expect("only the names of CallGraph::ALL are possible"))
}

fn parse_pid(s: &str) -> Result<u32, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if n > 0 && n <= i32::MAX as i64 => Ok(n as u32),
        Ok(_) => Err("a PID is a positive number".into()),
        Err(_) => Err("a PID is a positive number".into()),
    }
}

/// The longest time any flag takes (some 31 years): more would not fit the clocks' arithmetic.
const MAX_SECONDS: f64 = 1e9;

fn parse_duration(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('s');
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= MAX_SECONDS => Ok(v),
        Ok(v) if v > MAX_SECONDS => Err(format!("at most {MAX_SECONDS} seconds")),
        Ok(_) => Err("the duration must be a positive number of seconds".into()),
        Err(_) => Err("the duration must be a number of seconds, e.g. 10 or 2.5".into()),
    }
}

/// A CPU threshold: percent of one CPU, `50` or `50%`; whether the machine can reach it is checked against its
/// CPUs when the trap starts.
fn parse_percent(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(_) => Err("a CPU threshold is a percentage from 0 up to 100 per CPU (200 = two cores busy)".into()),
        Err(_) => Err("a CPU threshold is a number, percent of one CPU, e.g. 50 or 150".into()),
    }
}

/// A wait in seconds where 0 means none.
fn parse_wait(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('s').parse::<f64>() {
        Ok(v) if (0.0..=MAX_SECONDS).contains(&v) => Ok(v),
        _ => Err("a number of seconds, 0 or more, e.g. 3 or 0.5".into()),
    }
}

/// The largest `-mmap-pages`: 4 MiB per CPU with 4 KiB pages, more than a ring drained four times a second needs.
pub const MAX_MMAP_PAGES: usize = 1024;

fn parse_pages(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n.is_power_of_two() && n <= MAX_MMAP_PAGES => Ok(n),
        _ => Err(format!(
            "the page count must be a power of two from 1 to {MAX_MMAP_PAGES} (1, 2, 4, … {MAX_MMAP_PAGES}): each \
             CPU's ring buffer is locked memory, {MAX_MMAP_PAGES} pages are 4 MiB per CPU"
        )),
    }
}

/// Rewrites `-name`/`-name=value` to `--name…` for every long flag of `cli` (the whole CLI), before `--`. Short flags
/// (`-v`), values (`-5`) and unknown words are left alone so clap reports them.
fn normalize_args(cli: &clap::Command, args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut long_names = Vec::new();
    let mut short_names = vec!['h', 'V'];
    fn walk(cmd: &clap::Command, names: &mut Vec<String>, shorts: &mut Vec<char>) {
        for a in cmd.get_arguments() {
            if let Some(l) = a.get_long() {
                names.push(l.to_string());
            }
            shorts.extend(a.get_short());
        }
        names.extend(["help", "version"].map(String::from));
        for sub in cmd.get_subcommands() {
            walk(sub, names, shorts);
        }
    }
    walk(cli, &mut long_names, &mut short_names);

    let mut out = Vec::new();
    let mut passthrough = false;
    for arg in args {
        if passthrough {
            out.push(arg);
            continue;
        }
        let Some(s) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if s == "--" {
            passthrough = true;
        } else if s.len() > 2 && s.starts_with('-') && !s.starts_with("--") {
            let name = s[1..].split('=').next().unwrap_or("");
            if long_names.iter().any(|l| l == name) {
                out.push(OsString::from(format!("-{s}")));
                continue;
            }
            // An unknown word that is not a cluster of short flags (`-vv`): pass it as `--word` so clap's error
            // names the whole word instead of its first letter.
            let is_short_cluster = name.chars().all(|c| short_names.contains(&c));
            if !is_short_cluster && name.starts_with(|c: char| c.is_ascii_alphabetic()) {
                out.push(OsString::from(format!("-{s}")));
                continue;
            }
        }
        out.push(arg);
    }
    out
}

/// Parses the process arguments. Errors come back as clap errors so the caller decides how to show them.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Cli, clap::Error> {
    // Built once: building the whole CLI with its help texts costs more than parsing (0.6 ms in the static build).
    let mut cli = Cli::command();
    let args = normalize_args(&cli, args);
    let mut matches = cli.try_get_matches_from_mut(args)?;
    Cli::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut cli))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Cli, clap::Error> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn single_and_double_dash_long_flags_are_equivalent() {
        for args in [
            &["profcpu", "collect", "-pid", "42", "-duration", "5"][..],
            &["profcpu", "collect", "--pid", "42", "--duration", "5"],
            &["profcpu", "collect", "--pid=42", "-duration=5"],
        ] {
            let Command::Collect(c) = parse_strs(args).unwrap().command else { panic!() };
            assert_eq!((c.pid, c.options.duration), (42, 5.0));
        }
    }

    #[test]
    fn defaults_match_the_original_profcpu() {
        let Command::Collect(c) = parse_strs(&["profcpu", "collect"]).unwrap().command else { panic!() };
        assert_eq!((c.pid, c.options.duration, c.options.freq), (1, 30.0, 99));
        assert_eq!(c.options.output, PathBuf::from("profilings"));
    }

    #[test]
    fn arguments_after_double_dash_are_left_alone() {
        let Command::Collect(c) = parse_strs(&["profcpu", "collect", "--", "sh", "-pid", "-c"]).unwrap().command else {
            panic!()
        };
        assert_eq!(c.command, ["sh", "-pid", "-c"]);
    }

    #[test]
    fn modes_and_perfcollects_offcpu_flag() {
        let mode = |args: &[&str]| {
            let mut all = vec!["profcpu", "collect"];
            all.extend_from_slice(args);
            let Command::Collect(c) = parse_strs(&all).unwrap().command else { panic!() };
            c.options.mode()
        };
        assert_eq!(mode(&[]), Mode::Cpu);
        assert_eq!(mode(&["-mode", "wall"]), Mode::Wall);
        assert_eq!(mode(&["--mode=offcpu"]), Mode::Offcpu);
        assert_eq!(mode(&["-offcpu"]), Mode::Offcpu);
        assert!(parse_strs(&["profcpu", "collect", "-offcpu", "-mode", "wall"]).is_err());
        assert!(parse_strs(&["profcpu", "collect", "-mode", "idle"]).is_err());
    }

    #[test]
    fn bad_values_are_rejected() {
        for bad in [
            ["-duration", "0"],
            ["-duration", "-5"],
            ["-duration", "abc"],
            ["-duration", "1e20"],
            ["-duration", "inf"],
            ["-pid", "0"],
            ["-pid", "x"],
            ["-mmap-pages", "0"],
            ["-mmap-pages", "3"],
            ["-mmap-pages", "2048"],
            ["-mmap-pages", "1073741824"],
            ["-mmap-pages", "4611686018427387904"],
        ] {
            assert!(parse_strs(&["profcpu", "collect", bad[0], bad[1]]).is_err(), "{bad:?} accepted");
        }
        let err = parse_strs(&["profcpu", "collect", "-nosuchflag"]).unwrap_err().to_string();
        assert!(err.contains("--nosuchflag"), "{err}");
        assert!(parse_strs(&["profcpu", "-vv", "collect"]).is_ok());
    }

    #[test]
    fn trap_takes_one_condition_and_every_collect_option() {
        let Command::Trap(t) =
            parse_strs(&["profcpu", "trap", "-pid", "7", "-cpu-above", "150%", "-for", "0.5", "-duration", "2"])
                .unwrap()
                .command
        else {
            panic!()
        };
        assert_eq!((t.pid, t.cpu_above, t.cpu_below, t.hold), (7, Some(150.0), None, 0.5));
        assert_eq!((t.count, t.cooldown, t.timeout, t.scope), (1, 30.0, None, Scope::Process));
        assert_eq!((t.options.duration, t.options.freq), (2.0, 99));
        let Command::Trap(t) =
            parse_strs(&["profcpu", "trap", "--cpu-below=5", "-scope", "cgroup", "-count", "2", "-cooldown", "0"])
                .unwrap()
                .command
        else {
            panic!()
        };
        assert_eq!((t.cpu_below, t.scope, t.count, t.cooldown), (Some(5.0), Scope::Cgroup, 2, 0.0));
        for bad in [
            &["trap"][..],
            &["trap", "-cpu-above", "50", "-cpu-below", "20"],
            &["trap", "-cpu-above", "-5"],
            &["trap", "-cpu-above", "lots"],
            &["trap", "-cpu-above", "NaN"],
            &["trap", "-cpu-above", "50", "-count", "0"],
            &["trap", "-cpu-above", "50", "-for", "-1"],
            &["trap", "-cpu-above", "50", "-timeout", "0"],
            &["trap", "-cpu-above", "50", "-timeout", "1e300"],
            &["trap", "-cpu-above", "50", "-cooldown", "1e10"],
            &["trap", "-cpu-above", "50", "-scope", "container"],
        ] {
            let args: Vec<&str> = ["profcpu"].iter().chain(bad).copied().collect();
            assert!(parse_strs(&args).is_err(), "{bad:?} accepted");
        }
    }
}

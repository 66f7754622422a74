use std::process::ExitCode;

use profcpu::escape;
use profcpu::interrupt::{self, Interrupted, Stage};

fn main() -> ExitCode {
    // First of all: a Ctrl+C or SIGTERM at any moment must end in complete outputs or in nothing (see interrupt).
    if let Err(e) = interrupt::install() {
        eprintln!("profcpu: error: cannot catch SIGINT/SIGTERM ({e}); nothing was done");
        return ExitCode::FAILURE;
    }
    let cli = match profcpu::cli::parse(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => return report_usage_error(e),
    };
    init_logging(cli.verbose);
    match profcpu::commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A signal during set-up makes whatever set-up was doing fail too (EINTR, a half-opened event): the
            // signal is the story to tell.
            let interrupted = e.downcast_ref::<Interrupted>().cloned().or_else(|| {
                (interrupt::stage() == Stage::Starting).then(interrupt::received).flatten().map(|signal| {
                    tracing::debug!("set-up ended with: {e:#}");
                    Interrupted::before_sampling(signal)
                })
            });
            if let Some(interrupted) = interrupted {
                eprintln!("profcpu: {interrupted}");
                return ExitCode::from(interrupted.exit_code());
            }
            // One line: the whole context chain, outermost first; what it quotes from the input is escaped.
            eprintln!("profcpu: error: {}", escape::line(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

/// `--help`/`--version` print as clap renders them; a usage error becomes one line that says what to run for help.
fn report_usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = e.print();
        return ExitCode::from(2);
    }
    let rendered = e.render().to_string();
    let mut lines = rendered.lines();
    let mut first = lines.next().unwrap_or("invalid arguments").trim_start_matches("error: ").to_string();
    let indented: Vec<&str> = lines.take_while(|l| l.starts_with(' ')).map(str::trim).collect();
    if first.ends_with(':') {
        // "the following required arguments were not provided:" lists them on the indented lines below.
        first = format!("{first} {}", indented.join(", "));
    } else if let Some(values) = indented.iter().find(|l| l.starts_with("[possible values:")) {
        first = format!("{first} {values}");
    }
    eprintln!("profcpu: error: {} (see 'profcpu --help')", escape::line(&first));
    ExitCode::from(2)
}

fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "profcpu=warn",
        1 => "profcpu=info",
        _ => "profcpu=debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .event_format(LogLine { target: verbose > 1 })
        .init();
}

/// Log events read like profcpu's other messages: `profcpu: warning: …` (the module too with -vv).
struct LogLine {
    target: bool,
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for LogLine
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        use tracing::Level;
        let meta = event.metadata();
        let level = match *meta.level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            Level::INFO => "info",
            Level::DEBUG => "debug",
            Level::TRACE => "trace",
        };
        write!(writer, "profcpu: {level}: ")?;
        if self.target {
            write!(writer, "{}: ", meta.target())?;
        }
        // Messages quote names and paths from the input: escaped, and kept on one line.
        let mut message = String::new();
        ctx.field_format().format_fields(tracing_subscriber::fmt::format::Writer::new(&mut message), event)?;
        writeln!(writer, "{}", escape::line(&message))
    }
}

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match profcpu::cli::parse(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => return report_usage_error(e),
    };
    init_logging(cli.verbose);
    match profcpu::commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the whole context chain, outermost first.
            eprintln!("profcpu: error: {e:#}");
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
    eprintln!("profcpu: error: {first} (see 'profcpu --help')");
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
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

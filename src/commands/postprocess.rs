//! `profcpu postprocess -dir DIR`: regenerate every output from saved data, without the target or its files.
//!
//! DIR is one of: a profcpu output directory (perf.data + `symbols/`: named only from that capture, so the result
//! is the same on any machine), a directory with a perf.data from `perf record -g` (named from `perf-<pid>.map`
//! files beside it, then the live system like perf does), or a `prof.tar.gz` (extracted safely into a new folder
//! beside it first).

use super::pipeline::{self, FrameNames, MetadataSource, OutputRequest, Recording};
use crate::archive;
use crate::cli::PostprocessArgs;
use crate::fs::{input, Dir, InputError, Kind, Limit};
use crate::interrupt::{self, Stage};
use crate::report::metadata_txt::Metadata;
use crate::report::profile::ReportOptions;
use crate::report::view::View;
use crate::report::{self};
use crate::symbolize::SymbolizeOptions;
use anyhow::{anyhow, bail, Context, Result};
use std::path::Path;

pub fn run(args: PostprocessArgs) -> Result<()> {
    // A first Ctrl+C lets the outputs be finished; a second one stops at once, saying this.
    interrupt::set_stage(Stage::Writing { left: "the archive was not extracted: nothing was written".into() });
    let dir = input_dir(&args.dir)?;
    let extracted = dir.path() != args.dir.as_path();
    interrupt::set_stage(Stage::Writing {
        left: format!(
            "the outputs in {shown} were not regenerated (perf_script.out may be missing); run `profcpu postprocess \
             -dir {shown}` again",
            shown = dir.path().display()
        ),
    });
    let result = regenerate(args, &dir);
    if result.is_err() && extracted {
        // Extracted by this run, which failed: nothing in it is of use, and it may be large.
        let _ = dir.remove_contents();
        let _ = std::fs::remove_dir(dir.path());
        return result.map_err(|e| anyhow!("{e:#} (the folder it was extracted into was removed)"));
    }
    result
}

/// Writes the outputs in `dir` (the input folder, or where the archive was extracted).
fn regenerate(args: PostprocessArgs, dir: &Dir) -> Result<()> {
    let recording = match dir.open_input(pipeline::PERF_DATA_FILE, Limit::NONE) {
        Ok((file, _)) => file,
        Err(e) if e.error.is_not_found() => {
            if dir.kind(report::ARCHIVE_FILE) == Some(Kind::File) {
                bail!(
                    "{} holds no perf.data, only a {}: pass -dir {}",
                    dir.path().display(),
                    report::ARCHIVE_FILE,
                    dir.shown(report::ARCHIVE_FILE).display()
                );
            }
            bail!(
                "{} holds no perf.data: pass a profcpu output directory, a prof.tar.gz, or a directory with a \
                 perf.data from `perf record -g`",
                dir.path().display()
            );
        }
        Err(e) => return Err(e.into()),
    };

    let captured = match dir.kind(report::SYMBOLS_DIR) {
        Some(Kind::Dir) => Some(
            dir.open_dir(report::SYMBOLS_DIR)
                .with_context(|| format!("cannot open {}", dir.shown(report::SYMBOLS_DIR).display()))?,
        ),
        _ => None,
    };
    let collected_by_profcpu = captured.is_some();
    let mut symbolize = match captured {
        // A profcpu collection: name frames only from what it captured, so the result is the same on any machine.
        Some(captured) => SymbolizeOptions::offline(captured),
        // A `perf record` directory: perf maps saved beside perf.data (`perf-<pid>.map`, the layout of a capture)
        // are used first, then the live system (the target's /tmp, the mapped files, /proc/kallsyms).
        None => SymbolizeOptions { captured_dir: Some(dir.clone()), ..SymbolizeOptions::live() },
    };
    symbolize.debug_roots = args.symbols.symbols.clone();
    symbolize.force_maps = args.symbols.force_maps;
    symbolize.symbol_servers = super::symbol_servers(&args.symbols)?;
    symbolize.ignore_stack_copies = args.ignore_stack_copies;

    // A collection's metadata.txt says what the recorder knew (command line, namespace PID); for anything else,
    // perf.data itself is the truth (a metadata.txt there is only what an earlier postprocess derived from it).
    let metadata = if collected_by_profcpu {
        match read_metadata(dir) {
            Ok(m) => MetadataSource::Given(Box::new(m)),
            Err(e) => {
                tracing::warn!("{e:#}: using what perf.data says about the recording instead");
                MetadataSource::FromRecording
            }
        }
    } else {
        MetadataSource::FromRecording
    };
    let view = View { pid: args.pid, tid: args.tid, no_kernel: args.no_kernel, strip_tiers: args.strip_tiers };
    let summary = pipeline::generate(OutputRequest {
        dir,
        recording: Recording::Complete { file: recording, perf_data_segments: None, metadata },
        names: FrameNames::Options(symbolize),
        report: ReportOptions { view, per_thread: args.per_thread, ..ReportOptions::default() },
        title: args.title,
    })?;
    pipeline::print_summary(&summary);
    // The path is for scripts (`dir=$(profcpu postprocess …)`); a reader that went away is not an error.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), format!("{}\n", dir.path().display()).as_bytes());
    Ok(())
}

/// metadata.txt of a collection: a small regular file, read through the folder's descriptor.
fn read_metadata(dir: &Dir) -> Result<Metadata> {
    let bytes = dir.read_input(report::METADATA_FILE, Limit::METADATA)?;
    let shown = dir.shown(report::METADATA_FILE);
    let text = String::from_utf8(bytes).map_err(|_| anyhow!("{} is not text", shown.display()))?;
    Metadata::parse(&text, &shown.display().to_string())
}

/// The directory to work in: `path` itself, or for a `.tar.gz` a new folder beside it that the archive is safely
/// extracted into. Either is opened once; everything after goes through its descriptor.
fn input_dir(path: &Path) -> Result<Dir> {
    let meta = std::fs::metadata(path).with_context(|| format!("cannot open {}", path.display()))?;
    if meta.is_dir() {
        return Dir::open(path).with_context(|| format!("cannot open {}", path.display()));
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let Some(stem) = name.strip_suffix(".tar.gz").or_else(|| name.strip_suffix(".tgz")) else {
        bail!(
            "{} is neither a directory nor a .tar.gz archive: pass a profcpu output directory or its prof.tar.gz",
            path.display()
        );
    };
    // A regular file only: a FIFO named like an archive would block the read forever.
    let (archive_file, _) = input::open_path(path, Limit::NONE).map_err(|e| match e {
        InputError::NotRegular(_) => anyhow!("{}", e.explain(path)),
        other => anyhow!("cannot open {}: {other}", path.display()),
    })?;
    let parent_path = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let parent = Dir::open(parent_path).with_context(|| format!("cannot open {}", parent_path.display()))?;
    let (dest_name, dest) = (1..1000)
        .map(|i| if i == 1 { stem.to_string() } else { format!("{stem}-{i}") })
        .find_map(|name| match interrupt::remove_on_abort(&parent.shown(&name), || parent.create_dir(&name)) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => None,
            made => Some(
                made.map(|dir| (name.clone(), dir))
                    .with_context(|| format!("cannot create {}", parent.shown(&name).display())),
            ),
        })
        .with_context(|| format!("no free folder name for {stem} in {}", parent_path.display()))??;
    if let Err(e) = archive::extract_into(&archive_file, &path.display().to_string(), dest.fd(), dest.path()) {
        // The folder is ours and new: a refused or broken archive leaves nothing behind.
        let _ = dest.remove_contents();
        let _ = parent.remove_empty_dir(&dest_name, &dest);
        return Err(e);
    }
    let line = format!("profcpu: extracted {} into {}", path.display(), dest.path().display());
    eprintln!("{}", crate::escape::line(&line));
    Ok(dest)
}

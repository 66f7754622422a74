//! `profcpu postprocess -dir DIR`: regenerate every output from saved data, without the target or its files.
//!
//! DIR is one of: a profcpu output directory (perf.data + `symbols/`: named only from that capture, so the result
//! is the same on any machine), a directory with a perf.data from `perf record -g` (named from `perf-<pid>.map`
//! files beside it, then the live system like perf does), or a `prof.tar.gz` (extracted safely into a new folder
//! beside it first).

use super::pipeline::{self, MetadataSource, OutputRequest, PERF_DATA_FILE};
use crate::archive;
use crate::cli::PostprocessArgs;
use crate::report::metadata_txt::Metadata;
use crate::report::profile::ReportOptions;
use crate::report::view::View;
use crate::report::{self};
use crate::symbolize::SymbolizeOptions;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

pub fn run(args: PostprocessArgs) -> Result<()> {
    let dir = input_dir(&args.dir)?;
    let perf_data = dir.join(PERF_DATA_FILE);
    if !perf_data.is_file() {
        if dir.join(report::ARCHIVE_FILE).is_file() {
            bail!(
                "{} holds no perf.data, only a {}: pass -dir {}",
                dir.display(),
                report::ARCHIVE_FILE,
                dir.join(report::ARCHIVE_FILE).display()
            );
        }
        bail!(
            "{} holds no perf.data: pass a profcpu output directory, a prof.tar.gz, or a directory with a perf.data \
             from `perf record -g`",
            dir.display()
        );
    }

    let captured = dir.join(report::SYMBOLS_DIR);
    let collected_by_profcpu = captured.is_dir();
    let mut symbolize = if collected_by_profcpu {
        // A profcpu collection: name frames only from what it captured, so the result is the same on any machine.
        SymbolizeOptions::offline(captured)
    } else {
        // A `perf record` directory: perf maps saved beside perf.data (`perf-<pid>.map`, the layout of a capture)
        // are used first, then the live system (the target's /tmp, the mapped files, /proc/kallsyms).
        SymbolizeOptions { captured_dir: Some(dir.clone()), ..SymbolizeOptions::live() }
    };
    symbolize.debug_roots = args.symbols.symbols.clone();
    symbolize.force_maps = args.symbols.force_maps;
    symbolize.ignore_stack_copies = args.ignore_stack_copies;

    // A collection's metadata.txt says what the recorder knew (command line, namespace PID); for anything else,
    // perf.data itself is the truth (a metadata.txt there is only what an earlier postprocess derived from it).
    let metadata_path = dir.join(report::METADATA_FILE);
    let metadata = match Metadata::read(&metadata_path) {
        Ok(m) if collected_by_profcpu => MetadataSource::Given(Box::new(m)),
        Err(e) if collected_by_profcpu => {
            tracing::warn!("{e:#}: using what perf.data says about the recording instead");
            MetadataSource::FromRecording
        }
        _ => MetadataSource::FromRecording,
    };
    let view = View { pid: args.pid, tid: args.tid, no_kernel: args.no_kernel, strip_tiers: args.strip_tiers };
    let summary = pipeline::generate(OutputRequest {
        dir: &dir,
        symbolize,
        report: ReportOptions { view, per_thread: args.per_thread, ..ReportOptions::default() },
        title: args.title,
        metadata,
    })?;
    pipeline::print_summary(&summary);
    // The path is for scripts (`dir=$(profcpu postprocess …)`); a reader that went away is not an error.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), format!("{}\n", dir.display()).as_bytes());
    Ok(())
}

/// The directory to work in: `path` itself, or for a `.tar.gz` a new folder beside it that the archive is safely
/// extracted into.
fn input_dir(path: &Path) -> Result<PathBuf> {
    let meta = std::fs::metadata(path).with_context(|| format!("cannot open {}", path.display()))?;
    if meta.is_dir() {
        return Ok(path.to_owned());
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let Some(stem) = name.strip_suffix(".tar.gz").or_else(|| name.strip_suffix(".tgz")) else {
        bail!(
            "{} is neither a directory nor a .tar.gz archive: pass a profcpu output directory or its prof.tar.gz",
            path.display()
        );
    };
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let dest = (1..1000)
        .map(|i| if i == 1 { parent.join(stem) } else { parent.join(format!("{stem}-{i}")) })
        .find(|p| p.symlink_metadata().is_err())
        .with_context(|| format!("no free folder name for {stem} in {}", parent.display()))?;
    std::fs::create_dir(&dest).with_context(|| format!("cannot create {}", dest.display()))?;
    if let Err(e) = archive::extract_safe(path, &dest) {
        // The folder is ours and new: a refused or broken archive leaves nothing behind.
        let _ = std::fs::remove_dir_all(&dest);
        return Err(e);
    }
    eprintln!("profcpu: extracted {} into {}", path.display(), dest.display());
    Ok(dest)
}

//! `profcpu postprocess -dir DIR`: regenerate every output from saved data, without the target or its files.

use super::outputs::{self, OutputRequest, PERF_DATA_FILE};
use crate::archive;
use crate::cli::PostprocessArgs;
use crate::perf_data::{PerfDataReader, Record};
use crate::report::meta::Metadata;
use crate::report::view::View;
use crate::report::{self};
use crate::symbolize::SymbolizeOptions;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

pub fn run(args: PostprocessArgs) -> Result<()> {
    let dir = input_dir(&args.dir)?;
    let perf_data = dir.join(PERF_DATA_FILE);
    if !perf_data.is_file() {
        bail!(
            "{} holds no perf.data: pass a profcpu output directory, a prof.tar.gz, or a directory with a perf.data \
             from `perf record -g`",
            dir.display()
        );
    }

    let captured = dir.join(report::SYMBOLS_DIR);
    let mut symbolize = if captured.is_dir() {
        // A profcpu collection: name frames only from what it captured, so the result is the same on any machine.
        SymbolizeOptions::offline(captured)
    } else {
        // A `perf record` directory: perf maps saved beside perf.data (`perf-<pid>.map`, the layout of a capture)
        // are used first, then the live system (the target's /tmp, the mapped files, /proc/kallsyms).
        SymbolizeOptions { captured_dir: Some(dir.clone()), ..SymbolizeOptions::live() }
    };
    symbolize.debug_roots = args.symbols.symbols.clone();
    symbolize.force_maps = args.symbols.force_maps;

    let metadata = match Metadata::read(&dir.join(report::METADATA_FILE)) {
        Ok(m) => m,
        Err(_) => metadata_from_perf_data(&perf_data)?,
    };
    let view = View { pid: args.pid, tid: args.tid, no_kernel: args.no_kernel, strip_tiers: args.strip_tiers };
    let summary = outputs::generate(OutputRequest {
        dir: &dir,
        symbolize,
        view,
        per_thread: args.per_thread,
        title: args.title,
        metadata,
    })?;
    if summary.samples_shown == 0 {
        eprintln!("profcpu: warning: no samples left after filtering (-pid/-tid); the outputs are empty");
    }
    outputs::print_summary(&summary);
    println!("{}", dir.display());
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
        bail!("{} is neither a directory nor a .tar.gz archive", path.display());
    };
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let dest = (1..1000)
        .map(|i| if i == 1 { parent.join(stem) } else { parent.join(format!("{stem}-{i}")) })
        .find(|p| p.symlink_metadata().is_err())
        .with_context(|| format!("no free folder name for {stem} in {}", parent.display()))?;
    std::fs::create_dir(&dest).with_context(|| format!("cannot create {}", dest.display()))?;
    archive::extract_safe(path, &dest).with_context(|| format!("cannot extract {}", path.display()))?;
    eprintln!("profcpu: extracted {} into {}", path.display(), dest.display());
    Ok(dest)
}

/// What a perf.data says about itself, for a recording without profcpu's metadata.txt (e.g. from `perf record`).
fn metadata_from_perf_data(path: &Path) -> Result<Metadata> {
    let reader = PerfDataReader::open(path)?;
    let f = reader.features();
    let mut meta = Metadata {
        host: f.hostname.clone().unwrap_or_default(),
        kernel: f.osrelease.clone().unwrap_or_default(),
        event: reader.events()[0].name.clone(),
        ..Metadata::default()
    };
    let (mut first, mut last, mut lost) = (u64::MAX, 0u64, 0u64);
    let mut pids = std::collections::BTreeMap::<u32, u64>::new();
    reader.for_each_record(|r| {
        match r {
            Record::Sample(s) => {
                meta.samples += 1;
                first = first.min(s.time);
                last = last.max(s.time);
                *pids.entry(s.pid).or_default() += 1;
            }
            Record::Lost(l) => lost += l.lost,
            Record::LostSamples { lost: n, .. } => lost += n,
            _ => {}
        }
        Ok(())
    })?;
    meta.lost = lost;
    if meta.samples > 1 {
        meta.duration_secs = Some((last - first) as f64 / 1e9);
    }
    // The process with most samples is the one the recording was about.
    meta.pid = pids.iter().max_by_key(|(_, n)| **n).map(|(p, _)| *p);
    let attr = &reader.events()[0].attr;
    if attr.is_freq() {
        meta.frequency_hz = Some(attr.sample_freq_or_period());
    }
    Ok(meta)
}

//! `profcpu offsets`: the file offset of every method in the file-backed images (ReadyToRun .dll, ELF) a process
//! maps, one line `0xOFFSET IMAGE-PATH METHOD` each — what `perf probe -x IMAGE 0xOFFSET`, a bpftrace
//! `uprobe:IMAGE:0xOFFSET` or a tracefs `uprobe_events` line takes. For ReadyToRun code this is the computation users
//! otherwise do by hand from the image's perf map and `/proc/PID/maps`.

use crate::cli::OffsetsArgs;
use crate::symbolize::code_index::{CodeIndex, ImageFilter};
use crate::symbolize::parsers::ProcessInfo;
use crate::symbolize::SymbolizeOptions;
use anyhow::{bail, Result};
use std::io::Write;

pub fn run(args: OffsetsArgs) -> Result<()> {
    crate::record::check_target(&crate::record::Target::Pid(args.pid))?;
    let opts = SymbolizeOptions {
        debug_roots: args.symbols.symbols.clone(),
        force_maps: args.symbols.force_maps,
        ..SymbolizeOptions::live()
    };
    let filter = match &args.image {
        Some(name) => ImageFilter::Named(name),
        None => ImageFilter::All,
    };
    let index = CodeIndex::read(args.pid, &opts, filter)?;
    if index.images.is_empty() {
        match &args.image {
            Some(name) => bail!(
                "PID {} maps no executable image named like '{name}' with named code (`profcpu offsets -pid {}` \
                 lists them all)",
                args.pid,
                args.pid
            ),
            None => bail!("PID {} maps no ELF or ReadyToRun image with named code", args.pid),
        }
    }
    // Paths as this process reaches them: a container's files through its root.
    let prefix = match ProcessInfo::read(args.pid) {
        Some(info) if info.in_container() => format!("/proc/{}/root", args.pid),
        _ => String::new(),
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut lines = 0usize;
    for image in &index.images {
        let path = format!("{prefix}{}", image.path);
        let path = crate::escape::line(&path);
        for method in &image.methods {
            let name = strip_precompiled_tag(&method.name);
            writeln!(out, "{:#x} {path} {}", method.offset, crate::escape::line(name))?;
            lines += 1;
        }
    }
    out.flush()?;
    drop(out);
    eprintln!("profcpu: {lines} methods in {} images of PID {}", index.images.len(), args.pid);
    Ok(())
}

/// A ReadyToRun method's name without the runtime's `[PreJIT]` tag: every offset listed is precompiled code.
pub fn strip_precompiled_tag(name: &str) -> &str {
    name.strip_suffix("[PreJIT]").unwrap_or(name)
}

//! Finding the split debug file of a stripped binary, in the order GDB/perf users (and `dotnet-symbol`) place them:
//!
//! 1. `<path>.dbg` (dotnet-symbol next to the binary)   2. `<path>.debug`
//! 3. `<dir>/<debuglink>`                             4. `<dir>/.debug/<debuglink>`
//! 5. `/usr/lib/debug/<dir>/<debuglink>`              6. `/usr/lib/debug/.build-id/xx/rest.debug`
//! 7. `/usr/lib/debug/<path>.debug`
//!
//! each first inside the target's root (`/proc/<pid>/root`, resolved safely), then on the host. Extra symbol roots
//! (`-symbols DIR`) are searched like `/usr/lib/debug` (5–7), plus `DIR/<debuglink>` for a flat dotnet-symbol
//! `--output DIR`. Last, when the user named symbol servers (`-symbol-server`), the file is fetched by build-id
//! (see [`SymbolServers`]). Every candidate must match the binary's build-id (or, without one, the debuglink CRC):
//! a debug file of another build would name every frame wrongly.

use super::elf::{self, ElfImage, ElfInfo};
use super::symbol_server::SymbolServers;
use crate::fs::{Last, Root};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where to look, outermost first.
#[derive(Debug, Clone, Default)]
pub struct SearchRoots {
    /// The target's root (`/proc/<pid>/root`): paths resolve inside it, links included, never out of it.
    pub target_root: Option<Root>,
    /// Whether the host's own files may be searched.
    pub host: bool,
    pub extra: Vec<PathBuf>,
    /// Asked by build-id when no local candidate fits.
    pub servers: Option<Arc<SymbolServers>>,
}

/// Candidate paths (as the binary's filesystem sees them) for the binary at `path` in the documented order.
pub fn candidates(path: &str, info: &ElfInfo) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let p = Path::new(path);
    let dir = p.parent().unwrap_or(Path::new("/"));
    let rel_dir = dir.strip_prefix("/").unwrap_or(dir);
    let rel_path = p.strip_prefix("/").unwrap_or(p);
    out.push(PathBuf::from(format!("{path}.dbg")));
    out.push(PathBuf::from(format!("{path}.debug")));
    if let Some((link, _)) = &info.debuglink {
        out.push(dir.join(link));
        out.push(dir.join(".debug").join(link));
        out.push(Path::new("/usr/lib/debug").join(rel_dir).join(link));
    }
    if let Some(id) = build_id_path(info) {
        out.push(Path::new("/usr/lib/debug").join(id));
    }
    out.push(Path::new("/usr/lib/debug").join(format!("{}.debug", rel_path.display())));
    out
}

/// `.build-id/xx/rest.debug` for the binary's build-id.
fn build_id_path(info: &ElfInfo) -> Option<PathBuf> {
    let id = info.build_id.as_ref().filter(|id| id.len() >= 2)?;
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    Some(PathBuf::from(format!(".build-id/{}/{}.debug", &hex[..2], &hex[2..])))
}

/// Candidates under an extra root, searched like `/usr/lib/debug`.
fn extra_candidates(root: &Path, path: &str, info: &ElfInfo) -> Vec<PathBuf> {
    let p = Path::new(path);
    let rel_path = p.strip_prefix("/").unwrap_or(p);
    let rel_dir = rel_path.parent().unwrap_or(Path::new(""));
    let mut out = Vec::new();
    if let Some((link, _)) = &info.debuglink {
        out.push(root.join(rel_dir).join(link));
    }
    if let Some(id) = build_id_path(info) {
        out.push(root.join(id));
    }
    out.push(root.join(format!("{}.debug", rel_path.display())));
    if let Some((link, _)) = &info.debuglink {
        out.push(root.join(link));
    }
    out
}

/// A verified debug file, read on demand, and where it was found (for logs).
pub struct DebugFile {
    pub data: ElfImage,
    pub found_at: PathBuf,
}

/// Why candidates were rejected, for the log when nothing is found.
#[derive(Debug, Default)]
pub struct SearchReport {
    pub rejected: Vec<String>,
}

pub fn find_debug_file(
    path: &str,
    info: &ElfInfo,
    roots: &SearchRoots,
    report: &mut SearchReport,
) -> Option<DebugFile> {
    let mut tries: Vec<(PathBuf, Option<&Root>)> = Vec::new();
    let base = candidates(path, info);
    if let Some(root) = &roots.target_root {
        tries.extend(base.iter().map(|c| (c.clone(), Some(root))));
    }
    if roots.host {
        tries.extend(base.iter().map(|c| (c.clone(), None)));
    }
    for extra in &roots.extra {
        tries.extend(extra_candidates(extra, path, info).into_iter().map(|c| (c, None)));
    }
    let host = Root::host().ok();
    for (candidate, root) in tries {
        // Host candidates are not followed through a last symlink, as before the shared resolver; inside a
        // target's root the target's own links are followed (they cannot lead out).
        let opened = match (root, &host) {
            (Some(root), _) => root.open_file(&candidate, Last::Follow),
            (None, Some(host)) => host.open_file(&candidate, Last::NoFollow),
            (None, None) => continue,
        };
        let Ok(file) = opened else { continue };
        let Ok(Some(data)) = ElfImage::read(file) else { continue };
        let shown = match root {
            Some(r) => r.shown(&candidate),
            None => candidate.clone(),
        };
        match verify(info, &data) {
            Ok(()) => return Some(DebugFile { data, found_at: shown }),
            Err(why) => report.rejected.push(format!("{}: {why}", shown.display())),
        }
    }
    let servers = roots.servers.as_ref()?;
    let build_id = info.build_id.as_deref()?;
    fetch(servers, build_id, path, info, report)
}

/// The debug file of the binary at `path` from the symbol servers (or their cache), verified like a local one.
pub fn fetch(
    servers: &SymbolServers,
    build_id: &[u8],
    path: &str,
    info: &ElfInfo,
    report: &mut SearchReport,
) -> Option<DebugFile> {
    let file_name = path.rsplit('/').next().unwrap_or(path);
    let fetched = match servers.fetch_debug_file(build_id, file_name) {
        Ok(fetched) => fetched?,
        Err(e) => {
            report.rejected.push(format!("{file_name} from a symbol server: {e:#}"));
            return None;
        }
    };
    // The cache is profcpu's own (mode 0700), but a symlink put there is still not followed.
    let file = Root::host().ok()?.open_file(&fetched, Last::NoFollow).ok()?;
    let data = ElfImage::read(file).ok()??;
    match verify(info, &data) {
        Ok(()) => Some(DebugFile { data, found_at: fetched }),
        Err(why) => {
            report.rejected.push(format!("{}: {why}", fetched.display()));
            None
        }
    }
}

/// Whether `data` is the debug file of the binary described by `info`.
pub fn verify(info: &ElfInfo, data: &ElfImage) -> Result<(), String> {
    let debug = elf::inspect(data.bytes()).map_err(|e| e.to_string())?;
    if let Some(want) = &info.build_id {
        return match &debug.build_id {
            Some(got) if got == want => check_has_symbols(&debug),
            Some(_) => Err("build-id differs".into()),
            None => Err("has no build-id".into()),
        };
    }
    if let Some((_, crc)) = &info.debuglink {
        match elf::debuglink_crc_of(data.file()) {
            Ok(got) if got == *crc => {}
            Ok(_) => return Err("debuglink CRC differs".into()),
            Err(e) => return Err(format!("unreadable: {e}")),
        }
    }
    // Neither a build-id nor a debuglink: nothing to check against, the name is all we have.
    check_has_symbols(&debug)
}

fn check_has_symbols(debug: &ElfInfo) -> Result<(), String> {
    if debug.has_symtab_functions {
        Ok(())
    } else {
        Err("has no function symbols".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    fn info(build_id: Option<&[u8]>, link: Option<&str>) -> ElfInfo {
        ElfInfo {
            build_id: build_id.map(<[u8]>::to_vec),
            debuglink: link.map(|l| (l.to_string(), 0)),
            ..Default::default()
        }
    }

    #[test]
    fn candidate_order_is_the_documented_one() {
        let i = info(Some(&[0xab, 0xcd, 0xef]), Some("libcoreclr.so.dbg"));
        let c: Vec<String> =
            candidates("/usr/share/dotnet/libcoreclr.so", &i).iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            c,
            [
                "/usr/share/dotnet/libcoreclr.so.dbg",
                "/usr/share/dotnet/libcoreclr.so.debug",
                "/usr/share/dotnet/libcoreclr.so.dbg",
                "/usr/share/dotnet/.debug/libcoreclr.so.dbg",
                "/usr/lib/debug/usr/share/dotnet/libcoreclr.so.dbg",
                "/usr/lib/debug/.build-id/ab/cdef.debug",
                "/usr/lib/debug/usr/share/dotnet/libcoreclr.so.debug",
            ]
        );
        let e: Vec<String> = extra_candidates(Path::new("/syms"), "/usr/share/dotnet/libcoreclr.so", &i)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            e,
            [
                "/syms/usr/share/dotnet/libcoreclr.so.dbg",
                "/syms/.build-id/ab/cdef.debug",
                "/syms/usr/share/dotnet/libcoreclr.so.debug",
                "/syms/libcoreclr.so.dbg",
            ]
        );
    }

    #[test]
    fn without_build_id_or_link_only_path_based_candidates() {
        let c = candidates("/bin/app", &info(None, None));
        assert_eq!(c, [PathBuf::from("/bin/app.dbg"), "/bin/app.debug".into(), "/usr/lib/debug/bin/app.debug".into()]);
        // Hostile debuglink names with slashes are dropped when the ELF is read (see elf::inspect); a one-byte
        // build-id cannot form a .build-id path.
        assert!(build_id_path(&info(Some(&[1]), None)).is_none());
    }

    #[test]
    fn verification_rejects_other_builds() {
        let me_bytes = std::fs::read("/proc/self/exe").unwrap();
        let file = File::open("/proc/self/exe").unwrap();
        let me = ElfImage::read(file).unwrap().unwrap();
        let mine = elf::inspect(me.bytes()).unwrap();
        if mine.build_id.is_some() {
            assert!(verify(&mine, &me).is_ok());
            let other = info(Some(&[1, 2, 3, 4]), None);
            assert_eq!(verify(&other, &me).unwrap_err(), "build-id differs");
        }
        let crc = crc32fast::hash(&me_bytes);
        let by_crc = ElfInfo { debuglink: Some(("x".into(), crc)), ..Default::default() };
        assert!(verify(&by_crc, &me).is_ok());
        let bad_crc = ElfInfo { debuglink: Some(("x".into(), crc ^ 1)), ..Default::default() };
        assert_eq!(verify(&bad_crc, &me).unwrap_err(), "debuglink CRC differs");
    }
}

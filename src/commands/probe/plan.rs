//! From method patterns to probe events: which methods the patterns mean, where each method's code is, and how
//! its calls are counted.
//!
//! A method is one name (without a tier tag) and all of its code: a ReadyToRun body in a mapped .dll, JIT-compiled
//! tiers, or an ELF function. How calls are counted, per method:
//!
//! - **uprobes** on file-backed code (ELF functions, ReadyToRun bodies): each entry of that code.
//! - **precode**: a .NET method that is not virtual is entered through its FixupPrecode (see
//!   [`dotnet_stubs`](crate::record::dotnet_stubs)); a watchpoint on the precode's target slot sees every call into
//!   its JIT code, whatever the tier and however new, with no gap at a tier change. Its ReadyToRun body, if any, keeps
//!   its uprobe (calls landing there are counted by it, not twice).
//! - **breakpoints**: other JIT code (virtual .NET methods, whose new code is written into vtables; other JITs): an
//!   execute breakpoint on the entry of the newest version, and new versions followed as the runtime reports them
//!   (calls that reach a new version before its breakpoint is in place are missed).
//!
//! Precode watchpoints and breakpoints use debug registers, of which a thread has [`DEBUG_REGISTERS`]; registers
//! left over become spare breakpoints for following new versions.

use super::pattern::{self, Match, Name, MAX_METHODS};
use crate::record::dotnet_stubs::{Precode, PrecodeSearch, Stubs};
use crate::record::probe::{ProbeEvent, ProbePoint, DEBUG_REGISTERS};
use crate::record::uprobe_events::UprobeEvents;
use crate::symbolize::code_index::{CodeIndex, ImageFormat};
use anyhow::{bail, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// One body of a method's code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The runtime's tier tag (`QuickJitted`, `OptimizedTier1`, `PreJIT`); `None` for native code.
    pub tier: Option<String>,
    /// Its entry in the process.
    pub addr: u64,
    pub size: u64,
    /// Where it is in a file, for file-backed code.
    pub file: Option<FileCode>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileCode {
    /// The image as the target sees it.
    pub image: Arc<str>,
    /// A path this process reaches the very file by (for the uprobe).
    pub reachable: PathBuf,
    pub offset: u64,
    pub format: ImageFormat,
}

/// How a method's calls into JIT code are counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JitCounting {
    /// It has no JIT code and cannot get any (native code).
    None,
    Precode(Precode),
    Breakpoints,
}

#[derive(Debug, Clone)]
pub struct Method {
    /// Without a tier tag.
    pub name: String,
    pub dotnet: bool,
    pub is_virtual: Option<bool>,
    pub versions: Vec<Version>,
    /// The entry of its newest JIT code (where calls go now).
    pub newest_jit: Option<u64>,
    /// Since when (CLOCK_MONOTONIC ns) it has JIT code: 0 when it had some when probing began, `None` while it has
    /// none.
    pub jit_since: Option<u64>,
    pub jit: JitCounting,
    /// The patterns (by index) that mean it.
    pub patterns: Vec<usize>,
    /// Why the method is counted the way it is, when that is not the best way (for metadata and a notice).
    pub caveat: Option<String>,
}

impl Method {
    /// How its calls are counted, in words.
    pub fn mechanism(&self) -> String {
        let files = self.versions.iter().filter(|v| v.file.is_some()).count();
        let uprobes = (files > 0).then(|| match files {
            1 => "uprobe on its file-backed code".to_string(),
            n => format!("uprobes on its {n} file-backed bodies"),
        });
        let jit = match &self.jit {
            JitCounting::None => None,
            JitCounting::Precode(p) => Some(format!(
                "watchpoint on its precode's target slot {:#x} (precode {:#x}): every call into its JIT code, all \
                 tiers",
                p.target_slot, p.code
            )),
            JitCounting::Breakpoints => {
                Some("execute breakpoint on the entry of its newest JIT code, following new tiers".to_string())
            }
        };
        [uprobes, jit].into_iter().flatten().collect::<Vec<_>>().join(" + ")
    }

    /// The version whose entry is `addr`.
    pub fn version_at(&self, addr: u64) -> Option<usize> {
        self.versions.iter().position(|v| v.addr == addr)
    }

    /// Whether `addr` is the entry of file-backed code (counted by its uprobe).
    pub fn is_file_entry(&self, addr: u64) -> bool {
        self.versions.iter().any(|v| v.addr == addr && v.file.is_some())
    }
}

/// What each probe event counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The uprobe on `version` of `method`.
    Uprobe { method: usize, version: usize },
    /// The watchpoint on `method`'s precode.
    Precode { method: usize },
    /// An execute breakpoint: on a version of `method`, or spare (`None`) until a new version needs it.
    Breakpoint { method: Option<usize> },
}

pub struct Plan {
    pub methods: Vec<Method>,
    pub events: Vec<ProbeEvent>,
    /// Per event (same order).
    pub roles: Vec<Role>,
    /// Where each breakpoint event points now (by event index; spares hold `None`).
    pub breakpoints: BTreeMap<usize, Option<u64>>,
    /// The uprobes' definitions, removed when the plan is dropped (after the recording closed its events).
    pub uprobes: Option<UprobeEvents>,
}

/// Tier tags of code that is not a method's entry: on-stack replacement variants are jumped into from a running
/// loop, cold parts from their hot body.
pub fn is_entry_tier(tier: Option<&str>) -> bool {
    tier.map_or(true, |t| !t.contains("OSR") && !t.ends_with("-cold"))
}

/// The methods `patterns` mean in `index`, or one line saying which pattern means nothing (with the closest names)
/// or too much.
pub fn select(index: &CodeIndex, patterns: &[String]) -> Result<Vec<Method>> {
    // Every candidate name (without tier tags) and its versions.
    let mut by_name: BTreeMap<String, Vec<Version>> = BTreeMap::new();
    for code in &index.jit {
        let (name, tier) = pattern::split_tier(&code.name);
        if !is_entry_tier(tier) {
            continue;
        }
        by_name.entry(name.to_string()).or_default().push(Version {
            tier: tier.map(str::to_string),
            addr: code.start,
            size: code.size,
            file: None,
        });
    }
    for image in &index.images {
        for m in &image.methods {
            // A program not started yet has no addresses: its code is known by file offset alone.
            let Some(addr) = image.address_of(m.offset).or(image.mappings.is_empty().then_some(0)) else { continue };
            let (name, tier) = pattern::split_tier(&m.name);
            let (name, tier) = match image.format {
                ImageFormat::ReadyToRun => (name, tier),
                // A native symbol's brackets are its own.
                ImageFormat::Elf => (&*m.name, None),
            };
            by_name.entry(name.to_string()).or_default().push(Version {
                tier: tier.map(str::to_string),
                addr,
                size: m.size,
                file: Some(FileCode {
                    image: image.path.clone(),
                    reachable: image.reachable.clone(),
                    offset: m.offset,
                    format: image.format,
                }),
            });
        }
    }
    let mut chosen: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (p, pattern) in patterns.iter().enumerate() {
        let hits: Vec<(&str, Match)> = by_name
            .keys()
            .filter_map(|name| pattern::matches(pattern, &Name::of(name)).map(|m| (name.as_str(), m)))
            .collect();
        let best = hits.iter().map(|(_, m)| *m).min();
        let hits: Vec<&str> = hits.into_iter().filter(|(_, m)| Some(*m) == best).map(|(n, _)| n).collect();
        if hits.is_empty() {
            bail!("{}", nothing_matches(pattern, index, by_name.keys().map(String::as_str)));
        }
        if hits.len() > MAX_METHODS {
            let examples: Vec<&str> = hits.iter().take(8).copied().collect();
            bail!(
                "-method '{pattern}' matches {} methods (at most {MAX_METHODS} are probed at once), e.g. {}; give more \
                 of the name (`Namespace.Type::Method`) or a narrower glob",
                hits.len(),
                examples.join(", ")
            );
        }
        for name in hits {
            chosen.entry(name).or_default().push(p);
        }
    }
    if chosen.len() > MAX_METHODS {
        bail!("the patterns match {} methods together; at most {MAX_METHODS} are probed at once", chosen.len());
    }
    let methods = chosen
        .into_iter()
        .map(|(name, patterns)| {
            let versions = by_name[name].clone();
            Method {
                name: name.to_string(),
                dotnet: is_dotnet_name(name),
                is_virtual: None,
                versions,
                newest_jit: None,
                jit_since: None,
                jit: JitCounting::None,
                patterns,
                caveat: None,
            }
        })
        .collect();
    Ok(methods)
}

/// `… [Assembly] Namespace.Type::Method(…)`: how the .NET runtime names methods.
fn is_dotnet_name(name: &str) -> bool {
    name.contains("] ") && name.contains("::") && name.ends_with(')')
}

/// The line for a pattern that matches no method: where names were looked for and the closest ones.
fn nothing_matches<'a>(pattern: &str, index: &CodeIndex, names: impl Iterator<Item = &'a str>) -> String {
    let closest = pattern::closest(pattern, names, 5);
    let looked = match &index.jit_source {
        Some(source) => format!("JIT code in {source} and {} mapped images", index.images.len()),
        None => format!("{} mapped images (no perf map or jitdump: JIT code is unnamed)", index.images.len()),
    };
    let hint = if closest.is_empty() {
        String::new()
    } else {
        format!("; closest: {}", closest.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", "))
    };
    format!(
        "-method '{pattern}' matches no method of PID {} ({looked}; a JIT method appears once it is compiled, i.e. \
         called at least once){hint}",
        index.pid
    )
}

/// Decides how each method's calls are counted and lays out the probe events: uprobes first, then precode
/// watchpoints, then execute breakpoints on the newest JIT code, then spare breakpoints for new versions.
/// `stacks`: every call is a sample with its caller's stack; else calls are counted by the kernel where it can
/// (uprobes, breakpoints), and precode watchpoints sample without stacks (their hits must be looked at).
pub fn lay_out(
    index: &mut CodeIndex,
    mut methods: Vec<Method>,
    stubs: Option<&mut Stubs>,
    stacks: bool,
) -> Result<Plan> {
    let mut stubs = stubs;
    for m in &mut methods {
        m.newest_jit =
            m.versions.iter().filter(|v| v.file.is_none()).max_by_key(|v| newest_key(index, v.addr)).map(|v| v.addr);
        m.jit_since = m.newest_jit.map(|_| 0);
        let has_jit = m.versions.iter().any(|v| v.file.is_none());
        let may_get_jit = has_jit || (m.dotnet && m.versions.iter().any(|v| v.tier.as_deref() == Some("PreJIT")));
        if !may_get_jit {
            continue;
        }
        m.is_virtual = if m.dotnet { index.dotnet_is_virtual(&m.name) } else { None };
        m.jit = JitCounting::Breakpoints;
        if !m.dotnet {
            continue;
        }
        if m.is_virtual != Some(false) {
            m.caveat = Some(match m.is_virtual {
                Some(_) => "virtual: calls through vtables and interface dispatch do not pass its precode, so its JIT \
                            code gets breakpoints (calls reaching a new tier before its breakpoint are missed)"
                    .into(),
                None => {
                    "its metadata could not be read (is it virtual?): its JIT code gets breakpoints (calls reaching \
                         a new tier before its breakpoint are missed)"
                        .into()
                }
            });
            continue;
        }
        let entries: Vec<u64> = m.versions.iter().map(|v| v.addr).collect();
        match stubs.as_deref_mut().map(|s| s.find_precode(&entries)) {
            Some(PrecodeSearch::Found(p)) => m.jit = JitCounting::Precode(p),
            Some(PrecodeSearch::Ambiguous(found)) => {
                m.caveat = Some(format!(
                    "{} precodes lead to its code ({}): its JIT code gets breakpoints",
                    found.len(),
                    found.iter().map(|a| format!("{a:#x}")).collect::<Vec<_>>().join(", ")
                ))
            }
            _ => {
                m.caveat = Some(
                    "no precode leads to its code (never called yet, or a runtime older than .NET 7): its JIT code \
                     gets breakpoints (calls reaching a new tier before its breakpoint are missed)"
                        .into(),
                )
            }
        }
    }

    let mut events = Vec::new();
    let mut roles = Vec::new();
    let mut breakpoints = BTreeMap::new();
    let file_code: Vec<(usize, usize, &FileCode)> = methods
        .iter()
        .enumerate()
        .flat_map(|(i, m)| m.versions.iter().enumerate().filter_map(move |(v, ver)| Some((i, v, ver.file.as_ref()?))))
        .collect();
    let uprobes = match file_code.is_empty() {
        true => None,
        false => {
            let points: Vec<(PathBuf, u64)> =
                file_code.iter().map(|(_, _, f)| (f.reachable.clone(), f.offset)).collect();
            let (defined, ids) = UprobeEvents::define(&points)?;
            for ((i, v, file), id) in file_code.iter().zip(ids) {
                events.push(ProbeEvent {
                    name: event_name(&methods[*i].name),
                    point: ProbePoint::Uprobe { id, offset: file.offset },
                    armed: true,
                    sampled: stacks,
                });
                roles.push(Role::Uprobe { method: *i, version: *v });
            }
            Some(defined)
        }
    };
    for (i, m) in methods.iter().enumerate() {
        if let JitCounting::Precode(p) = &m.jit {
            events.push(ProbeEvent {
                name: event_name(&m.name),
                point: ProbePoint::Access { addr: p.target_slot },
                armed: true,
                sampled: true,
            });
            roles.push(Role::Precode { method: i });
        }
    }
    let mut follows = false;
    for (i, m) in methods.iter().enumerate() {
        if m.jit != JitCounting::Breakpoints {
            continue;
        }
        follows = true;
        // The newest code is the one the runtime calls; older tiers are no longer entered.
        if let Some(addr) = m.newest_jit {
            breakpoints.insert(events.len(), Some(addr));
            events.push(ProbeEvent {
                name: event_name(&m.name),
                point: ProbePoint::Execute { addr },
                armed: true,
                sampled: stacks,
            });
            roles.push(Role::Breakpoint { method: Some(i) });
        }
    }
    let registers = events.iter().filter(|e| e.point.is_breakpoint()).count();
    if registers > DEBUG_REGISTERS {
        bail!("{}", too_many_registers(&methods, registers));
    }
    if follows && registers == DEBUG_REGISTERS {
        for m in methods.iter_mut().filter(|m| m.jit == JitCounting::Breakpoints) {
            let caveat = "no debug register is left to follow its new tiers: calls to code newer than now are missed";
            m.caveat = Some(match m.caveat.take() {
                Some(earlier) => format!("{earlier}; {caveat}"),
                None => caveat.to_string(),
            });
        }
    }
    if follows {
        let spare_at = methods.iter().flat_map(|m| &m.versions).map(|v| v.addr).next().unwrap_or(0x1000);
        for _ in registers..DEBUG_REGISTERS {
            breakpoints.insert(events.len(), None);
            events.push(ProbeEvent {
                name: "probe:spare".to_string(),
                point: ProbePoint::Execute { addr: spare_at },
                armed: false,
                sampled: stacks,
            });
            roles.push(Role::Breakpoint { method: None });
        }
    }
    Ok(Plan { methods, events, roles, breakpoints, uprobes })
}

/// Orders a JIT code body by when it was reported.
fn newest_key(index: &CodeIndex, addr: u64) -> u64 {
    index.jit.iter().find(|c| c.start == addr).map_or(0, |c| c.order)
}

/// The line for more JIT code addresses than debug registers.
fn too_many_registers(methods: &[Method], needed: usize) -> String {
    let jit: Vec<String> = methods
        .iter()
        .filter(|m| m.jit != JitCounting::None)
        .map(|m| Name::of(&m.name).qualified.to_string())
        .collect();
    format!(
        "{needed} JIT code addresses would need hardware breakpoints ({}), but x86-64 has {DEBUG_REGISTERS} debug \
         registers per thread: probe at most {DEBUG_REGISTERS} JIT-compiled methods at once (file-backed code — \
         native functions, ReadyToRun methods — takes none)",
        jit.join(", ")
    )
}

/// The event's name in perf.data: `probe:` and the method's qualified name, in characters perf tools parse.
pub fn event_name(method: &str) -> String {
    let qualified = Name::of(method).qualified;
    let clean: String = qualified
        .chars()
        .map(
            |c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '`' | '<' | '>' | ',') { c } else { '_' },
        )
        .take(200)
        .collect();
    format!("probe:{clean}")
}

//! Names for ReadyToRun (R2R) code, from the image file alone.
//!
//! .NET framework assemblies (System.Private.CoreLib.dll, System.Linq.dll, …) and many app assemblies carry
//! precompiled native code. The runtime does not report it in the perf map (3.1 never; 8.0 writes `[PreJIT]`
//! entries only to the jitdump, and only as methods are first used), so without this module its frames are
//! `System.Private.CoreLib.dll+0x…`.
//!
//! Layout (spec: dotnet/runtime `docs/design/coreclr/botr/readytorun-format.md`, `src/coreclr/inc/readytorun.h`):
//! PE → CLI header → `READYTORUN_HEADER` ([`pe`]) → section 102 RuntimeFunctions (sorted code blocks), 103
//! MethodDefEntryPoints (a [`native::NativeArray`] by MethodDef row: entry runtime function index), 109
//! InstanceMethodEntryPoints (a [`native::NativeHashtable`] of generic instantiations: R2R method signature, then
//! the entry), 120 HotColdMap (cold parts). Runtime functions no entry claims are funclets of the nearest
//! preceding method. Names come from the ECMA-335 metadata ([`metadata`]) and signatures ([`signature`]).
//!
//! Names are spelled exactly as the runtime's own perf map/jitdump spells them (`MethodDesc::GetFullMethodInfo`),
//! with the runtime's tier tag: `int32 [System.Private.CoreLib] System.String::IndexOf(char,int32)[PreJIT]`
//! (cold parts: `[PreJit-cold]`, as the runtime writes it), so an R2R frame and a later JIT'd tier of the same
//! method differ only in the tag (`-strip-tiers` merges them).
//!
//! Supported: the section layout shared by R2R major versions 3 to 9 (checked on .NET Core 3.1.23, format 3.1, and
//! .NET 8.0.4, format 9.1); x64 gets exact function bounds, other CPUs approximate ones (their RUNTIME_FUNCTION
//! has no end). A facade with an R2R header but no code is reported as such. Generic instantiations are named with their owner type's instantiation (`Dictionary`2[System.__Canon,
//! System.Int32]::TryInsert(!0,!1,…)`); types from other assemblies in an instantiation print as `?` unless that
//! assembly's file is supplied with [`R2rImage::add_reference`] (see [`R2rImage::missing_references`]).
//! Composite images (one native file for many assemblies, found through the `RTR_HEADER` export) are parsed for
//! their code ranges ([`R2rImage::function_start`]) but not named: their metadata lives in the component files.
//! A component file itself is refused with the name of its composite image.
//!
//! Use from the symbolizer (wired in [`r2r_symbols`](super::r2r_symbols)): parse the file a sample's mapping names
//! (capped in size, read through the target's root), turn `pgoff + ip − start` into an RVA with
//! [`R2rImage::rva_of_file_offset`] (see below), then [`R2rImage::lookup`]; when it returns `None`,
//! [`R2rImage::function_start`] still gives one box per code block. [`R2rImage::methods`] lists every range (for an
//! offsets listing or uprobes at `method_start` of `CodePart::Body` entries). An `.r2rmap` beside the file, when
//! present, is read with [`R2rMap`] (crossgen2's spelling, not the runtime's): the symbolizer uses it for code no
//! method claims.
//!
//! # From an instruction pointer in a live process to an RVA
//!
//! CoreCLR on Linux (PAL `MAPMapPEFile`) reserves the image's virtual size, maps the PE headers at the base and then
//! each section at `base + align_down(VirtualAddress)` from file offset `align_down(PointerToRawData)`. crossgen2
//! lays sections out so `VirtualAddress ≡ PointerToRawData (mod page size)`, so within every such mapping
//! `file offset − RVA` is constant. The robust rule is therefore:
//!
//! `file offset = mapping.file_offset + (ip − mapping.start)`, then `RVA` = that offset translated through the PE
//! section table (`offset − PointerToRawData + VirtualAddress` of the section holding it).
//!
//! "ip − start of the mapping at file offset 0" is *not* safe: the first section is also mapped from file offset 0,
//! one page-aligned step above the base. Observed in /proc/PID/maps of a running app on this machine:
//! * .NET 8.0.4 CoreLib (`.text` VA 0x10200, raw 0x200): `r--p 0` at base (headers), `r-xp 0` at base+0x10000
//!   (`.text`!), `rw-p 0x93e000` at base+0x96e000 (`.data`); plus a separate flat `r--s 0` view of the whole file.
//! * .NET Core 3.1.23 CoreLib (`.data` first at VA 0x10200, `.text` VA 0x43200 raw 0x23200): `r--p 0` at base,
//!   `rw-p 0` at base+0x10000 (`.data`), `r-xp 0x23000` at base+0x43000 (`.text`).
//!
//! In both, the rule above gives `RVA = ip − base` with `base` the header mapping that perfinfo-PID.map reports.
//! It needs no knowledge of which mapping holds the headers and works for any number of loads of the same file
//! (each `ip` is translated through the mapping that contains it). perf's MMAP2 records carry the same
//! `(start, len, pgoff)` triple, so recorded data is translated offline the same way; the symbolizer does so for
//! every mapped file and hands the file offset to [`R2rImage::rva_of_file_offset`].
//!
//! The file is untrusted (it may come from a container): every read is bounds-checked, every walk bounded; a bad
//! file yields an error or fewer names, never a panic.

mod metadata;
mod native;
mod pe;
mod r2rmap;
mod signature;

pub use pe::{Machine, PeSection};
pub use r2rmap::R2rMap;

use anyhow::{bail, Result};
use metadata::Metadata;
use native::{NativeArray, NativeHashtable, NativeReader};
use signature::{Modules, SigReader};
use std::collections::BTreeMap;

const NO_METHOD: u32 = u32::MAX;

const SIG_UPDATE_CONTEXT: u32 = 0x80;
const SIG_OWNER_TYPE: u32 = 0x40;
const SIG_CONSTRAINED: u32 = 0x20;
const SIG_MEMBER_REF_TOKEN: u32 = 0x10;
const SIG_SLOT_INSTEAD_OF_TOKEN: u32 = 0x08;
const SIG_METHOD_INSTANTIATION: u32 = 0x04;
const ELEMENT_TYPE_MODULE_ZAPSIG: u8 = 0x3f;

/// Which part of a method a code range is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodePart {
    /// The method's main body (its entry point is `method_start`).
    Body,
    /// An exception handler funclet, placed after the body.
    Funclet,
    /// Code split off by hot/cold splitting (R2R 8+ HotColdMap).
    Cold,
}

/// A named code range of an R2R image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct R2rMethod {
    /// The runtime's spelling plus its tier tag: `… System.String::IndexOf(char,int32)[PreJIT]`.
    pub name: String,
    /// RVA and size of the runtime function (code block) holding the looked-up RVA.
    pub start: u32,
    pub len: u32,
    /// RVA of the method's entry point (its main body's first byte).
    pub method_start: u32,
    /// Size of the method's hot code: main body plus the funclets after it (what the runtime's jitdump reports as
    /// a `[PreJIT]` method's size).
    pub method_len: u32,
    pub part: CodePart,
    /// Whether the method is virtual (calls may come through vtable slots rather than its entry stub); `None` when
    /// unknown (a generic instantiation).
    pub is_virtual: Option<bool>,
}

/// One runtime function (code block): `[start, end)` RVAs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeRange {
    pub start: u32,
    pub end: u32,
}

enum MethodKey {
    /// A MethodDef of the image's own module.
    Def(u32),
    /// An instantiation: its R2R method signature, `(start, len)` in `instance_signatures`.
    Instance(u32, u32),
}

struct Method {
    key: MethodKey,
    /// Index of the entry runtime function.
    entry: u32,
    /// End RVA of its last hot runtime function (body or funclet).
    hot_end: u32,
}

/// A parsed ReadyToRun image. Names are built when asked for; parsing only indexes code ranges.
pub struct R2rImage {
    version: (u16, u16),
    composite: bool,
    sections: Vec<PeSection>,
    assembly: String,
    metadata: Option<Metadata>,
    manifest: Option<Metadata>,
    /// Metadata of other assemblies, by module index (see [`Modules`]).
    references: BTreeMap<u32, Metadata>,
    /// Module indexes that instance signatures use, for [`missing_references`](Self::missing_references).
    used_modules: Vec<u32>,
    functions: Vec<CodeRange>,
    /// Per runtime function: index into `methods` of its owner, or `NO_METHOD`.
    owners: Vec<u32>,
    first_cold: u32,
    methods: Vec<Method>,
    instance_signatures: Vec<u8>,
}

impl R2rImage {
    /// Parses an image. Errors name the problem: not a PE file, an IL-only assembly (no precompiled code), a
    /// component of a composite image (whose code is in another file), a corrupt header.
    pub fn parse(bytes: &[u8]) -> Result<R2rImage> {
        let headers = pe::parse(bytes)?;
        let metadata = match headers.metadata {
            Some((start, end)) => Some(
                Metadata::parse(&bytes[start as usize..end as usize])
                    .map_err(|e| anyhow::anyhow!("corrupt ECMA metadata: {e}"))?,
            ),
            None => None,
        };
        let manifest = headers
            .section(pe::SECTION_MANIFEST_METADATA)
            .and_then(|s| headers.section_file_range(s))
            .and_then(|(start, end)| Metadata::parse(&bytes[start as usize..end as usize]).ok());
        let assembly = metadata.as_ref().map(Metadata::assembly_name).unwrap_or_default();
        let reader = NativeReader::new(bytes);

        let functions = read_runtime_functions(&headers, &reader);
        let mut image = R2rImage {
            version: (headers.major, headers.minor),
            composite: headers.composite,
            sections: headers.sections.clone(),
            assembly,
            metadata,
            manifest,
            references: BTreeMap::new(),
            used_modules: Vec::new(),
            owners: vec![NO_METHOD; functions.len()],
            functions,
            first_cold: 0,
            methods: Vec::new(),
            instance_signatures: Vec::new(),
        };
        image.first_cold = image.functions.len() as u32;
        if !image.composite {
            image.read_method_def_entry_points(&headers, &reader);
            image.read_instance_entry_points(&headers, bytes, &reader);
        }
        image.assign_owners(&headers, &reader);
        if image.functions.is_empty() {
            bail!("ReadyToRun image without precompiled code (a facade that only forwards types?): nothing to name");
        }
        Ok(image)
    }

    /// The method whose code holds `rva`, named; `None` for unclaimed code (stubs, or a composite image).
    pub fn lookup(&self, rva: u32) -> Option<R2rMethod> {
        let index = self.function_index(rva)?;
        self.method_at(index)
    }

    /// The runtime function (code block) holding `rva`, named or not: one box per function for unnamed code.
    pub fn function_start(&self, rva: u32) -> Option<CodeRange> {
        self.function_index(rva).map(|i| self.functions[i])
    }

    /// Every named code range (bodies, funclets, cold parts), in RVA order. Names are built as you iterate.
    pub fn methods(&self) -> impl Iterator<Item = R2rMethod> + '_ {
        (0..self.functions.len()).filter_map(|i| self.method_at(i))
    }

    /// How many methods have precompiled code (entry points).
    pub fn method_count(&self) -> usize {
        self.methods.len()
    }

    pub fn function_count(&self) -> usize {
        self.functions.len()
    }

    /// `(major, minor)` of the READYTORUN_HEADER (.NET Core 3.1: 3.x/4.x, .NET 8: 9.x).
    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    /// The assembly's simple name (`System.Private.CoreLib`); empty for a composite image.
    pub fn assembly_name(&self) -> &str {
        &self.assembly
    }

    /// The PE sections, for [`rva_of`].
    pub fn sections(&self) -> &[PeSection] {
        &self.sections
    }

    /// The file offset holding the code at `rva` (where a uprobe on it goes).
    pub fn file_offset_of_rva(&self, rva: u32) -> Option<u64> {
        self.sections.iter().find_map(|s| s.file_offset_of_rva(rva))
    }

    /// The RVA of a file offset (e.g. a perf sample's `pgoff + ip − start`).
    pub fn rva_of_file_offset(&self, offset: u64) -> Option<u32> {
        pe::rva_of_file_offset(&self.sections, offset)
    }

    /// Simple names of other assemblies whose metadata would complete generic instantiation names (types from
    /// them print as `?` until [`add_reference`](Self::add_reference) supplies them).
    pub fn missing_references(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .used_modules
            .iter()
            .filter(|index| self.module(**index).is_none())
            .filter_map(|&index| self.module_assembly_name(index))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Supplies another assembly (its file's bytes: any .NET PE, IL-only or R2R) for the module indexes that name
    /// `name`. Returns whether any index used it.
    pub fn add_reference(&mut self, name: &str, bytes: &[u8]) -> Result<bool> {
        let indexes: Vec<u32> = self
            .used_modules
            .iter()
            .copied()
            .filter(|&i| i != 0 && self.module_assembly_name(i).is_some_and(|n| n.eq_ignore_ascii_case(name)))
            .collect();
        if indexes.is_empty() {
            return Ok(false);
        }
        let metadata = reference_metadata(bytes)?;
        if !metadata.assembly_name().eq_ignore_ascii_case(name) {
            bail!("the file supplied for assembly '{name}' is assembly '{}'", metadata.assembly_name());
        }
        for &index in &indexes[1..] {
            self.references.insert(index, reference_metadata(bytes)?);
        }
        self.references.insert(indexes[0], metadata);
        Ok(true)
    }

    fn function_index(&self, rva: u32) -> Option<usize> {
        let i = self.functions.partition_point(|f| f.start <= rva).checked_sub(1)?;
        (rva < self.functions[i].end).then_some(i)
    }

    fn method_at(&self, index: usize) -> Option<R2rMethod> {
        let method_index = *self.owners.get(index)?;
        let method = self.methods.get(method_index as usize)?;
        let function = self.functions[index];
        let part = if index as u32 == method.entry {
            CodePart::Body
        } else if index as u32 >= self.first_cold {
            CodePart::Cold
        } else {
            CodePart::Funclet
        };
        let mut name = self.method_name(method);
        name.push_str(if part == CodePart::Cold { "[PreJit-cold]" } else { "[PreJIT]" });
        let method_start = self.functions.get(method.entry as usize).map_or(function.start, |f| f.start);
        let is_virtual = match method.key {
            MethodKey::Def(rid) => self
                .metadata
                .as_ref()
                .and_then(|md| md.method_def(rid))
                .map(|row| row.flags & metadata::METHOD_VIRTUAL != 0),
            MethodKey::Instance(..) => None,
        };
        Some(R2rMethod {
            name,
            start: function.start,
            len: function.end - function.start,
            method_start,
            method_len: method.hot_end.saturating_sub(method_start),
            part,
            is_virtual,
        })
    }

    fn method_name(&self, method: &Method) -> String {
        let named = match method.key {
            MethodKey::Def(rid) => self.metadata.as_ref().and_then(|md| method_def_name(md, &self.assembly, rid, None)),
            MethodKey::Instance(start, len) => self
                .instance_signatures
                .get(start as usize..(start as usize).checked_add(len as usize).unwrap_or(0))
                .and_then(|sig| self.instance_method_name(sig)),
        };
        let name = named.unwrap_or_else(|| {
            format!("[{}] ?method@{:#x}", self.assembly, self.functions[method.entry as usize].start)
        });
        super::name_limit::cap_string(name)
    }

    /// Names an InstanceMethodEntryPoints signature (readytorun-format.md "Method signatures"): flags, optional
    /// module override, optional owner type, MethodDef/MemberRef row, optional method instantiation.
    fn instance_method_name(&self, sig: &[u8]) -> Option<String> {
        let mut r = SigReader::new(sig);
        let flags = r.u32()?;
        let mut module = 0;
        let mut method_module = 0;
        if flags & SIG_UPDATE_CONTEXT != 0 {
            module = r.u32()?;
            method_module = module;
        }
        let mut owner = None;
        if flags & SIG_OWNER_TYPE != 0 {
            // Without an explicit context the method token lives where the owner type's module override points.
            if flags & SIG_UPDATE_CONTEXT == 0 && sig.get(r.pos) == Some(&ELEMENT_TYPE_MODULE_ZAPSIG) {
                let mut peek = r.clone();
                peek.pos += 1;
                method_module = peek.u32()?;
            }
            let mut name = String::new();
            signature::r2r_type(self, module, module, &mut r, Some(&mut name))?;
            owner = Some(name);
        }
        if flags & SIG_SLOT_INSTEAD_OF_TOKEN != 0 {
            return None;
        }
        let rid = r.u32()?;
        let md = self.module(method_module)?;
        let assembly = if method_module == 0 { self.assembly.clone() } else { md.assembly_name() };
        if flags & SIG_MEMBER_REF_TOKEN != 0 {
            let row = md.member_ref(rid)?;
            let owner = match owner {
                Some(owner) => owner,
                None => {
                    let mut name = String::new();
                    let parent = row.parent;
                    match metadata::table_of(parent) {
                        metadata::TYPE_DEF => signature::type_def_name(md, metadata::rid_of(parent), &mut name)?,
                        _ => name.push('?'),
                    }
                    name
                }
            };
            let sig = md.blob(row.signature)?;
            signature::full_method_name(md, sig, &assembly, &owner, &md.string(row.name))
        } else {
            method_def_name(md, &assembly, rid, owner)
        }
    }

    fn module_assembly_name(&self, index: u32) -> Option<String> {
        let md = self.metadata.as_ref()?;
        let own_refs = md.rows(metadata::ASSEMBLY_REF);
        if index == 0 {
            return Some(self.assembly.clone());
        }
        if index <= own_refs {
            return Some(md.assembly_ref_name(index).into_owned());
        }
        let manifest = self.manifest.as_ref()?;
        let mut manifest_index = index - own_refs;
        if self.manifest_is_a_module() {
            if manifest_index == 1 {
                return Some(manifest.assembly_name());
            }
            manifest_index -= 1;
        }
        (manifest_index <= manifest.rows(metadata::ASSEMBLY_REF))
            .then(|| manifest.assembly_ref_name(manifest_index).into_owned())
    }

    /// From R2R 6.3 on, the module index right after the AssemblyRefs is the manifest metadata itself.
    fn manifest_is_a_module(&self) -> bool {
        self.version.0 > 6 || (self.version.0 == 6 && self.version.1 >= 3)
    }

    fn read_method_def_entry_points(&mut self, headers: &pe::Headers, reader: &NativeReader) {
        let Some(md) = &self.metadata else { return };
        let Some((start, _)) =
            headers.section(pe::SECTION_METHOD_DEF_ENTRY_POINTS).and_then(|s| headers.section_file_range(s))
        else {
            return;
        };
        let Some(array) = NativeArray::new(reader, start) else { return };
        let count = array.len().min(md.rows(metadata::METHOD_DEF));
        for rid in 1..=count {
            let Some(at) = array.get(reader, rid - 1) else { continue };
            if let Some(entry) = entry_function(reader, at).filter(|&e| (e as usize) < self.functions.len()) {
                self.methods.push(Method { key: MethodKey::Def(rid), entry, hot_end: 0 });
            }
        }
    }

    fn read_instance_entry_points(&mut self, headers: &pe::Headers, bytes: &[u8], reader: &NativeReader) {
        let Some((start, end)) =
            headers.section(pe::SECTION_INSTANCE_METHOD_ENTRY_POINTS).and_then(|s| headers.section_file_range(s))
        else {
            return;
        };
        let Some(table) = NativeHashtable::new(reader, start, end) else { return };
        let mut used = std::collections::BTreeSet::new();
        for at in table.entries(reader) {
            let Some(sig) = bytes.get(at as usize..) else { continue };
            let Some(len) = instance_signature_len(sig, &mut used) else { continue };
            let Some(entry) =
                (at as usize).checked_add(len).and_then(|e| entry_function(reader, u32::try_from(e).ok()?))
            else {
                continue;
            };
            if entry as usize >= self.functions.len() {
                continue;
            }
            let sig_start = self.instance_signatures.len() as u32;
            self.instance_signatures.extend_from_slice(&sig[..len]);
            self.methods.push(Method { key: MethodKey::Instance(sig_start, len as u32), entry, hot_end: 0 });
        }
        self.used_modules = used.into_iter().collect();
    }

    /// Gives every runtime function its method: entry points claim theirs, the functions after an entry (up to the
    /// next entry) are its funclets, and HotColdMap ranges are cold parts of the method owning their hot entry.
    fn assign_owners(&mut self, headers: &pe::Headers, reader: &NativeReader) {
        let count = self.functions.len() as u32;
        for (index, method) in self.methods.iter().enumerate() {
            let slot = &mut self.owners[method.entry as usize];
            if *slot == NO_METHOD {
                *slot = index as u32;
            }
        }
        // HotColdMap: u32 pairs {first cold runtime function, hot entry runtime function}, sorted by cold index;
        // cold functions are at the end of the table.
        let mut cold_ranges = Vec::new();
        if let Some((start, end)) =
            headers.section(pe::SECTION_HOT_COLD_MAP).and_then(|s| headers.section_file_range(s))
        {
            let mut at = start;
            while at + 8 <= end {
                if let (Some(cold), Some(hot)) = (reader.u32(at), reader.u32(at + 4)) {
                    cold_ranges.push((cold, hot));
                }
                at += 8;
            }
        }
        cold_ranges.retain(|&(cold, hot)| cold < count && hot < count);
        cold_ranges.sort_unstable();
        self.first_cold = cold_ranges.first().map_or(count, |&(cold, _)| cold);
        let mut current = NO_METHOD;
        for index in 0..self.first_cold as usize {
            if self.owners[index] != NO_METHOD {
                current = self.owners[index];
            } else {
                self.owners[index] = current;
            }
            if let Some(method) = self.methods.get_mut(current as usize) {
                method.hot_end = method.hot_end.max(self.functions[index].end);
            }
        }
        for (i, &(cold, hot)) in cold_ranges.iter().enumerate() {
            let next = cold_ranges.get(i + 1).map_or(count, |&(next, _)| next);
            let owner = self.owners[hot as usize];
            for index in cold..next {
                self.owners[index as usize] = owner;
            }
        }
    }
}

impl Modules for R2rImage {
    fn module(&self, index: u32) -> Option<&Metadata> {
        if index == 0 {
            return self.metadata.as_ref();
        }
        if let Some(md) = self.references.get(&index) {
            return Some(md);
        }
        let own_refs = self.metadata.as_ref()?.rows(metadata::ASSEMBLY_REF);
        (self.manifest_is_a_module() && index == own_refs + 1).then_some(self.manifest.as_ref()?)
    }
}

/// The name of MethodDef `rid`: owner (its declaring type unless an instantiated owner is given), name and
/// signature.
fn method_def_name(md: &Metadata, assembly: &str, rid: u32, owner: Option<String>) -> Option<String> {
    let row = md.method_def(rid)?;
    let owner = match owner {
        Some(owner) => owner,
        None => {
            let mut name = String::new();
            signature::type_def_name(md, md.declaring_type(rid)?, &mut name)?;
            name
        }
    };
    let method = md.string(row.name);
    match md.blob(row.signature).and_then(|sig| signature::full_method_name(md, sig, assembly, &owner, &method)) {
        Some(name) => Some(name),
        None => Some(format!("[{assembly}] {owner}::{method}(?)")),
    }
}

/// Length of an instance entry's R2R method signature, noting the module indexes it refers to.
fn instance_signature_len(sig: &[u8], used: &mut std::collections::BTreeSet<u32>) -> Option<usize> {
    struct NoModules;
    impl Modules for NoModules {
        fn module(&self, _: u32) -> Option<&Metadata> {
            None
        }
    }
    let mut r = SigReader::new(sig);
    let flags = r.u32()?;
    if flags & SIG_UPDATE_CONTEXT != 0 {
        used.insert(r.u32()?);
    }
    if flags & SIG_OWNER_TYPE != 0 {
        signature::r2r_type(&NoModules, 0, 0, &mut r, None)?;
        used.extend(r.modules_seen.iter().copied());
    }
    r.u32()?; // method token row (or slot)
    if flags & SIG_METHOD_INSTANTIATION != 0 {
        let count = r.u32()?;
        for _ in 0..count {
            signature::r2r_type(&NoModules, 0, 0, &mut r, None)?;
        }
    }
    if flags & SIG_CONSTRAINED != 0 {
        signature::r2r_type(&NoModules, 0, 0, &mut r, None)?;
    }
    Some(r.pos)
}

/// The entry runtime function of an entry point: `(index << 1) | has_fixups`, with fixups `(index << 2) | 0b11 or
/// 0b01` — ReadyToRunReader `GetRuntimeFunctionIndexFromOffset`.
fn entry_function(reader: &NativeReader, at: u32) -> Option<u32> {
    let (id, _) = reader.unsigned(at)?;
    Some(if id & 1 != 0 { id >> 2 } else { id >> 1 })
}

/// Section 102: x64 entries are `{begin, end, unwind}`; other CPUs store `{begin, unwind}` and a function ends
/// where the next begins (an approximation).
fn read_runtime_functions(headers: &pe::Headers, reader: &NativeReader) -> Vec<CodeRange> {
    let Some((start, end)) = headers.section(pe::SECTION_RUNTIME_FUNCTIONS).and_then(|s| headers.section_file_range(s))
    else {
        return Vec::new();
    };
    let size = headers.machine.runtime_function_size();
    let count = (end - start) / size;
    let mut functions: Vec<CodeRange> = (0..count)
        .map(|i| {
            let at = start + i * size;
            let begin = reader.u32(at).unwrap_or(0);
            let end = if size == 12 { reader.u32(at + 4).unwrap_or(begin) } else { begin };
            CodeRange { start: begin, end: end.max(begin) }
        })
        .collect();
    if size != 12 {
        for i in 0..functions.len() {
            let next = functions.get(i + 1).map_or(functions[i].start.saturating_add(1), |f| f.start);
            functions[i].end = next.max(functions[i].start);
        }
    }
    functions
}

/// The methods an assembly file (IL-only or ReadyToRun) declares, named as the runtime names them without a tier tag
/// (`int64 [App] Books::Reconcile(int32)`), each with whether it is virtual. JIT-compiled code carries the same
/// names, so this tells how calls reach a JIT method.
pub fn declared_methods(bytes: &[u8]) -> Result<Vec<(String, bool)>> {
    let md = reference_metadata(bytes)?;
    let assembly = md.assembly_name();
    let methods = (1..=md.rows(metadata::METHOD_DEF))
        .filter_map(|rid| {
            let flags = md.method_def(rid)?.flags;
            Some((method_def_name(&md, &assembly, rid, None)?, flags & metadata::METHOD_VIRTUAL != 0))
        })
        .collect();
    Ok(methods)
}

/// Metadata of a referenced assembly file (IL-only or ReadyToRun: only its metadata is wanted).
fn reference_metadata(bytes: &[u8]) -> Result<Metadata> {
    let (start, end) = pe::metadata_range(bytes)?;
    Metadata::parse(&bytes[start as usize..end as usize]).map_err(|e| anyhow::anyhow!("corrupt ECMA metadata: {e}"))
}

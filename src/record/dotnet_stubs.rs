//! The entry stubs of CoreCLR (.NET 7 and later, x64) in a live process's memory: how `probe` finds the one place
//! every call of a .NET method passes through, whatever tier of its code runs.
//!
//! A method that may get new code (tiered compilation: ReadyToRun or Tier0 code, then instrumented, then Tier1)
//! is entered through its **FixupPrecode**, a stub that jumps through a target slot the runtime rewrites whenever
//! the method's code changes. Callers either call the precode or, in JIT-compiled callers, call indirectly through
//! its target slot (`call [slot]`); both read the slot once per call. A hardware watchpoint on that slot therefore
//! sees every call, with no gap when the method moves to a new tier — which breakpoints on the code itself cannot
//! promise, since new code runs before anyone outside can arm a breakpoint on it. Virtual methods are the exception:
//! the runtime writes their new code straight into vtable slots and interface dispatch stubs, so their calls bypass
//! the precode (`probe` checks the method's metadata).
//!
//! Layouts (dotnet/runtime `src/coreclr/vm/amd64/thunktemplates.S`, `precode.h`, `callcounting.h`; "interleaved"
//! stubs: code page, then its data page at a fixed distance — 16 KB in .NET 8):
//! - FixupPrecode (24 bytes): `jmp [rip+d]` (FF 25) → Target; `mov r10, [rip+d]` (4C 8B 15) → MethodDesc;
//!   `jmp [rip+d]` (FF 25) → PrecodeFixupThunk. The three data words are consecutive.
//! - CallCountingStub (24 bytes), placed between a precode and the code while calls are being counted:
//!   `mov rax, [rip+d]` (48 8B 05) → count cell; `dec word [rax]` (66 FF 08); `je +6` (74 06); `jmp [rip+d]`
//!   (FF 25) → the code; `jmp [rip+d]` (FF 25) → threshold handler.
//!
//! Measured on .NET 8.0.4: a static method called 600 times while it went from Tier0 (through a call-counting stub)
//! to InstrumentedTier to OptimizedTier1 — 600 reads of its precode's target slot that land in its code or stubs,
//! plus 12 by the runtime itself (from libcoreclr, while it rewrote the slot).
//!
//! Every read is of the target's memory through `/proc/<pid>/mem`; anything that does not match a layout exactly is
//! ignored, so an older runtime (whose precodes look different) simply has none.

use crate::procfs::{MapsEntry, Process};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Executable anonymous memory read in all: stub and code heaps of a large service take a few tens of MB.
const MAX_SCANNED: u64 = 128 << 20;

/// A method's FixupPrecode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Precode {
    /// Its first instruction.
    pub code: u64,
    /// The word it jumps through: where the method's current entry (code or call-counting stub) is written.
    pub target_slot: u64,
    pub method_desc: u64,
    /// The runtime's fixup thunk (the third word): where a call lands while the method has no code.
    pub fixup_thunk: u64,
}

/// What looking for a method's precode found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrecodeSearch {
    Found(Precode),
    NotFound,
    /// More than one precode leads to the method's code (their addresses).
    Ambiguous(Vec<u64>),
}

/// The stubs of one process, read from its memory.
pub struct Stubs {
    mem: File,
    /// Executable anonymous or W^X double-mapped regions: `(start, bytes)`.
    regions: Vec<(u64, Vec<u8>)>,
    targets: HashMap<u64, Option<u64>>,
}

impl Stubs {
    /// Reads the executable memory of process `pid` that holds JIT code and stubs.
    pub fn read(pid: u32) -> io::Result<Stubs> {
        let maps = Process::open(pid)?.maps()?;
        let mem = File::open(format!("/proc/{pid}/mem"))?;
        let mut regions = Vec::new();
        let mut total = 0u64;
        for m in maps.iter().filter(|m| m.is_executable() && is_anonymous_code(m)) {
            let len = m.end - m.start;
            if total + len > MAX_SCANNED {
                break;
            }
            let mut bytes = vec![0u8; len as usize];
            if mem.read_exact_at(&mut bytes, m.start).is_ok() {
                total += len;
                regions.push((m.start, bytes));
            }
        }
        Ok(Stubs { mem, regions, targets: HashMap::new() })
    }

    /// The precode through which calls reach code starting at any of `entries` (a method's code bodies), directly or
    /// through a call-counting stub.
    pub fn find_precode(&mut self, entries: &[u64]) -> PrecodeSearch {
        let entries: HashSet<u64> = entries.iter().copied().collect();
        let mut leads: HashSet<u64> = entries.clone();
        let counting: Vec<u64> = self.candidates(counting_stub_slot).collect();
        for stub in counting {
            if self.target(stub).is_some_and(|t| entries.contains(&t)) {
                leads.insert(stub);
            }
        }
        let precodes: Vec<u64> = self.candidates(precode_slot).collect();
        let mut found = Vec::new();
        for code in precodes {
            if self.target(code).is_some_and(|t| leads.contains(&t)) {
                found.push(code);
            }
        }
        match found.as_slice() {
            [] => PrecodeSearch::NotFound,
            [code] => match self.precode_at(*code) {
                Some(p) => PrecodeSearch::Found(p),
                None => PrecodeSearch::NotFound,
            },
            _ => PrecodeSearch::Ambiguous(found),
        }
    }

    /// Where the stub at `addr` (a call-counting stub or a precode) jumps to now; `None` when no stub is there.
    pub fn target(&mut self, addr: u64) -> Option<u64> {
        if let Some(known) = self.targets.get(&addr) {
            return *known;
        }
        let slot = self
            .code_at(addr, 24)
            .and_then(|code| counting_stub_slot(addr, &code).or_else(|| precode_slot(addr, &code)));
        let target = slot.and_then(|slot| self.word(slot));
        self.targets.insert(addr, target);
        target
    }

    fn precode_at(&self, code: u64) -> Option<Precode> {
        let slot = precode_slot(code, &self.code_at(code, 24)?)?;
        Some(Precode { code, target_slot: slot, method_desc: self.word(slot + 8)?, fixup_thunk: self.word(slot + 16)? })
    }

    /// Addresses (8-aligned) in the scanned regions whose bytes match a stub layout (`slot_of` says which).
    fn candidates<'a>(&'a self, slot_of: fn(u64, &[u8]) -> Option<u64>) -> impl Iterator<Item = u64> + 'a {
        self.regions.iter().flat_map(move |(start, bytes)| {
            (0..bytes.len().saturating_sub(23))
                .step_by(8)
                .filter(move |&i| slot_of(start + i as u64, &bytes[i..i + 24]).is_some())
                .map(move |i| start + i as u64)
        })
    }

    /// `len` bytes of code at `addr`: from the regions read at the start, else (stubs made since) from memory.
    fn code_at(&self, addr: u64, len: usize) -> Option<std::borrow::Cow<'_, [u8]>> {
        let scanned = self.regions.iter().find(|(s, b)| *s <= addr && addr < s + b.len() as u64);
        if let Some(bytes) = scanned.and_then(|(start, bytes)| bytes.get((addr - start) as usize..)?.get(..len)) {
            return Some(bytes.into());
        }
        let mut bytes = vec![0u8; len];
        self.mem.read_exact_at(&mut bytes, addr).ok()?;
        Some(bytes.into())
    }

    /// A word of the target's memory (the data pages are not executable, so they are read one word at a time).
    fn word(&self, addr: u64) -> Option<u64> {
        let mut bytes = [0u8; 8];
        self.mem.read_exact_at(&mut bytes, addr).ok()?;
        Some(u64::from_le_bytes(bytes))
    }
}

/// JIT code and stubs live in anonymous memory or, with W^X (.NET 7+ default), in `memfd:doublemapper` mappings.
fn is_anonymous_code(m: &MapsEntry) -> bool {
    m.path.is_empty() || m.path.starts_with("/memfd:doublemapper") || m.path.starts_with("[anon:")
}

/// The RIP-relative target of `FF 25 disp32` (`jmp [rip+disp32]`) at `code[at..]`, the instruction being at `addr`.
fn jmp_slot(addr: u64, code: &[u8], at: usize) -> Option<u64> {
    (code.get(at..at + 2)? == [0xFF, 0x25]).then(|| rip_relative(addr, code, at + 2, at + 6))?
}

/// `addr + end + disp32` where the disp32 is at `code[disp..]` and the instruction ends at `code[end]`.
fn rip_relative(addr: u64, code: &[u8], disp: usize, end: usize) -> Option<u64> {
    let d = i32::from_le_bytes(code.get(disp..disp + 4)?.try_into().ok()?);
    Some(addr.wrapping_add(end as u64).wrapping_add(d as i64 as u64))
}

/// The target slot of a FixupPrecode at `addr` (24 bytes of code), if the bytes are one.
fn precode_slot(addr: u64, code: &[u8]) -> Option<u64> {
    let target = jmp_slot(addr, code, 0)?;
    if code.get(6..9)? != [0x4C, 0x8B, 0x15] || rip_relative(addr, code, 9, 13)? != target + 8 {
        return None;
    }
    (jmp_slot(addr, code, 13)? == target + 16).then_some(target)
}

/// The target slot of a CallCountingStub at `addr` (24 bytes of code), if the bytes are one.
fn counting_stub_slot(addr: u64, code: &[u8]) -> Option<u64> {
    if code.get(0..3)? != [0x48, 0x8B, 0x05] || code.get(7..12)? != [0x66, 0xFF, 0x08, 0x74, 0x06] {
        return None;
    }
    let target = jmp_slot(addr, code, 12)?;
    jmp_slot(addr, code, 18)?;
    Some(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes seen in a .NET 8.0.4 process: a FixupPrecode at 0x7f740d30b0a8 and a call-counting stub at
    /// 0x7f740d9329b8 (data pages 16 KB further on).
    #[test]
    fn real_stub_bytes_decode() {
        let precode = hex("ff25fa3f00004c8b15fb3f0000ff25fd3f000090488b05f9");
        assert_eq!(precode_slot(0x7f740d30b0a8, &precode), Some(0x7f740d30f0a8));
        assert_eq!(counting_stub_slot(0x7f740d30b0a8, &precode), None);
        let stub = hex("488b05f93f000066ff087406ff25f63f0000ff25f83f0000");
        assert_eq!(counting_stub_slot(0x7f740d9329b8, &stub), Some(0x7f740d9369c0));
        assert_eq!(precode_slot(0x7f740d9329b8, &stub), None);
        // A jmp whose second and third words are not next to the first is not a precode.
        let mut other = precode.clone();
        other[9] = 0xfc;
        assert_eq!(precode_slot(0x7f740d30b0a8, &other), None);
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }
}

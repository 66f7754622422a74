//! Signatures (ECMA-335 §II.23.2) turned into the names the .NET runtime itself writes into perf maps and jitdumps,
//! so a ReadyToRun frame and a later JIT tier of the same method look alike.
//!
//! The runtime builds those names in `MethodDesc::GetFullMethodInfo` (vm/method.cpp):
//! `PrettyPrintSig(signature, "[Assembly] Owner::Method")`, where
//! * the parameter and return types follow `PrettyPrintType` in `inc/formattype.cpp` (ILDASM's spellings: `int32`,
//!   `native uint`, `char`, `string`, `class [System.Runtime]System.Func`2<!0,bool>`, `valuetype X`, `!0`, `!!0`,
//!   `int32[]`, `uint8&`, `char*`, nested types as `Outer/Inner`), and
//! * the owner type follows `TypeString::AppendType` with `FormatNamespace` (reflection spellings:
//!   `System.Collections.Generic.Dictionary`2[System.__Canon,System.Int32]`, nested types as `Outer+Inner`).
//!
//! ReadyToRun instance entry signatures (readytorun-format.md, "Signatures") add `ELEMENT_TYPE_CANON_ZAPSIG`
//! (`System.__Canon`) and `ELEMENT_TYPE_MODULE_ZAPSIG` (the following type's tokens belong to another module).
//!
//! Signatures come from an untrusted file: every decoder here is bounded (a node budget caps work and output even
//! for TypeSpecs that refer to each other) and returns `None` on malformed input instead of panicking.

use super::metadata::{self, compressed_u32, Metadata, Token};
use std::fmt::Write;

const ELEMENT_TYPE_VOID: u8 = 0x01;
const ELEMENT_TYPE_BOOLEAN: u8 = 0x02;
const ELEMENT_TYPE_CHAR: u8 = 0x03;
const ELEMENT_TYPE_I1: u8 = 0x04;
const ELEMENT_TYPE_U1: u8 = 0x05;
const ELEMENT_TYPE_I2: u8 = 0x06;
const ELEMENT_TYPE_U2: u8 = 0x07;
const ELEMENT_TYPE_I4: u8 = 0x08;
const ELEMENT_TYPE_U4: u8 = 0x09;
const ELEMENT_TYPE_I8: u8 = 0x0a;
const ELEMENT_TYPE_U8: u8 = 0x0b;
const ELEMENT_TYPE_R4: u8 = 0x0c;
const ELEMENT_TYPE_R8: u8 = 0x0d;
const ELEMENT_TYPE_STRING: u8 = 0x0e;
const ELEMENT_TYPE_PTR: u8 = 0x0f;
const ELEMENT_TYPE_BYREF: u8 = 0x10;
const ELEMENT_TYPE_VALUETYPE: u8 = 0x11;
const ELEMENT_TYPE_CLASS: u8 = 0x12;
const ELEMENT_TYPE_VAR: u8 = 0x13;
const ELEMENT_TYPE_ARRAY: u8 = 0x14;
const ELEMENT_TYPE_GENERICINST: u8 = 0x15;
const ELEMENT_TYPE_TYPEDBYREF: u8 = 0x16;
const ELEMENT_TYPE_I: u8 = 0x18;
const ELEMENT_TYPE_U: u8 = 0x19;
const ELEMENT_TYPE_FNPTR: u8 = 0x1b;
const ELEMENT_TYPE_OBJECT: u8 = 0x1c;
const ELEMENT_TYPE_SZARRAY: u8 = 0x1d;
const ELEMENT_TYPE_MVAR: u8 = 0x1e;
const ELEMENT_TYPE_CMOD_REQD: u8 = 0x1f;
const ELEMENT_TYPE_CMOD_OPT: u8 = 0x20;
const ELEMENT_TYPE_SENTINEL: u8 = 0x41;
const ELEMENT_TYPE_PINNED: u8 = 0x45;
/// ReadyToRun/zapsig extensions (vm/zapsig.h).
const ELEMENT_TYPE_NATIVE_VALUETYPE_ZAPSIG: u8 = 0x3d;
const ELEMENT_TYPE_CANON_ZAPSIG: u8 = 0x3e;
const ELEMENT_TYPE_MODULE_ZAPSIG: u8 = 0x3f;

const CALLCONV_MASK: u32 = 0x0f;
const CALLCONV_FIELD: u32 = 0x06;
const CALLCONV_GENERICINST: u32 = 0x0a;
const CALLCONV_GENERIC: u32 = 0x10;
const CALLCONV_HASTHIS: u32 = 0x20;
const CALLCONV_EXPLICITTHIS: u32 = 0x40;

/// Work allowed for one name: generous for real signatures (a few dozen nodes), small enough that hostile
/// self-referencing TypeSpecs cannot blow up time or memory.
const NODE_BUDGET: u32 = 4096;

/// A cursor over signature bytes.
#[derive(Clone)]
pub struct SigReader<'a> {
    bytes: &'a [u8],
    pub pos: usize,
    budget: u32,
    /// Module indexes of the `ELEMENT_TYPE_MODULE_ZAPSIG`s decoded so far.
    pub modules_seen: Vec<u32>,
}

impl<'a> SigReader<'a> {
    pub fn new(bytes: &'a [u8]) -> SigReader<'a> {
        SigReader { bytes, pos: 0, budget: NODE_BUDGET, modules_seen: Vec::new() }
    }

    fn spend(&mut self) -> Option<()> {
        self.budget = self.budget.checked_sub(1)?;
        Some(())
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn byte(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }

    pub fn u32(&mut self) -> Option<u32> {
        let (value, used) = compressed_u32(self.bytes.get(self.pos..)?)?;
        self.pos += used;
        Some(value)
    }

    /// §II.23.2 compressed signed integer (used by array lower bounds).
    fn i32(&mut self) -> Option<i32> {
        let start = self.pos;
        let raw = self.u32()?;
        // The sign bit rotated into bit 0 stands for a bias of −2^(width − 1).
        let neg_bias = match self.pos - start {
            1 => 0x40,
            2 => 0x2000,
            _ => 0x1000_0000,
        };
        let magnitude = (raw >> 1) as i32;
        Some(if raw & 1 != 0 { magnitude - neg_bias } else { magnitude })
    }

    /// A TypeDefOrRefOrSpecEncoded token (§II.23.2.8).
    fn type_token(&mut self) -> Option<Token> {
        let raw = self.u32()?;
        let table = match raw & 3 {
            0 => metadata::TYPE_DEF,
            1 => metadata::TYPE_REF,
            2 => metadata::TYPE_SPEC,
            _ => 0x72, // mdtBaseType: never valid here; printed as an invalid token like the runtime does
        };
        Some(metadata::token(table, raw >> 2))
    }
}

// ---------------------------------------------------------------------------------------------------------------
// PrettyPrintSig: parameter and return types in ILDASM spelling (inc/formattype.cpp)
// ---------------------------------------------------------------------------------------------------------------

/// The runtime's full method name: `PrettyPrintSig(sig, "[assembly] owner::method")`.
pub fn full_method_name(md: &Metadata, sig: &[u8], assembly: &str, owner: &str, method: &str) -> Option<String> {
    let mut out = String::with_capacity(96);
    let label = format!("[{assembly}] {owner}::{method}");
    let mut r = SigReader::new(sig);
    pretty_signature(md, &mut r, &label, &mut out)?;
    Some(out)
}

/// `PrettyPrintSignature` for a method signature; `name` goes between the return type and the parameters.
fn pretty_signature(md: &Metadata, r: &mut SigReader, name: &str, out: &mut String) -> Option<()> {
    r.spend()?;
    let call_conv = r.u32()?;
    if call_conv & CALLCONV_MASK == CALLCONV_FIELD {
        pretty_type(md, r, out)?;
        if !name.is_empty() {
            out.push(' ');
            out.push_str(name);
        }
        return Some(());
    }
    if call_conv & CALLCONV_EXPLICITTHIS != 0 {
        out.push_str("explicit ");
    }
    if call_conv & CALLCONV_HASTHIS != 0 {
        out.push_str("instance ");
    }
    let generic_inst = call_conv & CALLCONV_MASK == CALLCONV_GENERICINST;
    if !generic_inst {
        match call_conv & CALLCONV_MASK {
            0 => {}
            1 => out.push_str("unmanaged cdecl "),
            2 => out.push_str("unmanaged stdcall "),
            3 => out.push_str("unmanaged thiscall "),
            4 => out.push_str("unmanaged fastcall "),
            5 => out.push_str("vararg "),
            9 => out.push_str("unmanaged "),
            other => {
                let _ = write!(out, "callconv({other}) ");
            }
        }
    }
    if call_conv & CALLCONV_GENERIC != 0 {
        r.u32()?;
    }
    let mut remaining = r.u32()?;
    if !generic_inst {
        pretty_type(md, r, out)?;
        if !name.is_empty() {
            out.push(' ');
            out.push_str(name);
        }
    }
    out.push(if generic_inst { '<' } else { '(' });
    let mut need_comma = false;
    while r.peek().is_some() {
        if r.peek() == Some(ELEMENT_TYPE_SENTINEL) {
            if need_comma {
                out.push(',');
            }
            out.push_str("...");
            r.byte();
        } else {
            if remaining == 0 {
                break;
            }
            if need_comma {
                out.push(',');
            }
            pretty_type(md, r, out)?;
            remaining -= 1;
        }
        need_comma = true;
    }
    if remaining > 0 {
        out.push_str(" [SIGNATURE ENDED PREMATURELY]");
    }
    out.push(if generic_inst { '>' } else { ')' });
    Some(())
}

/// `PrettyPrintType`: modifiers (`[]`, `*`, `&`, `modreq(...)`, ` pinned`) collect in an appendix, innermost
/// first, that follows the element type.
fn pretty_type(md: &Metadata, r: &mut SigReader, out: &mut String) -> Option<()> {
    let mut appendix = String::new();
    loop {
        r.spend()?;
        let element = r.byte()?;
        let simple = match element {
            ELEMENT_TYPE_VOID => "void",
            ELEMENT_TYPE_BOOLEAN => "bool",
            ELEMENT_TYPE_CHAR => "char",
            ELEMENT_TYPE_I1 => "int8",
            ELEMENT_TYPE_U1 => "uint8",
            ELEMENT_TYPE_I2 => "int16",
            ELEMENT_TYPE_U2 => "uint16",
            ELEMENT_TYPE_I4 => "int32",
            ELEMENT_TYPE_U4 => "uint32",
            ELEMENT_TYPE_I8 => "int64",
            ELEMENT_TYPE_U8 => "uint64",
            ELEMENT_TYPE_R4 => "float32",
            ELEMENT_TYPE_R8 => "float64",
            ELEMENT_TYPE_U => "native uint",
            ELEMENT_TYPE_I => "native int",
            ELEMENT_TYPE_OBJECT => "object",
            ELEMENT_TYPE_STRING => "string",
            ELEMENT_TYPE_TYPEDBYREF => "typedref",
            _ => "",
        };
        if !simple.is_empty() {
            out.push_str(simple);
            break;
        }
        match element {
            ELEMENT_TYPE_VALUETYPE | ELEMENT_TYPE_CLASS => {
                out.push_str(if element == ELEMENT_TYPE_CLASS { "class " } else { "valuetype " });
                let token = r.type_token()?;
                if metadata::rid_of(token) == 0 {
                    out.push_str("[ERROR! NIL TOKEN]");
                } else {
                    pretty_class(md, token, out, r)?;
                }
                break;
            }
            ELEMENT_TYPE_SZARRAY => appendix.insert_str(0, "[]"),
            ELEMENT_TYPE_ARRAY => {
                pretty_type(md, r, out)?;
                pretty_array_shape(r, out)?;
                break;
            }
            ELEMENT_TYPE_VAR | ELEMENT_TYPE_MVAR => {
                out.push_str(if element == ELEMENT_TYPE_VAR { "!" } else { "!!" });
                let _ = write!(out, "{}", r.u32()? as i32);
                break;
            }
            ELEMENT_TYPE_FNPTR => {
                out.push_str("method ");
                pretty_signature(md, r, "*", out)?;
                break;
            }
            ELEMENT_TYPE_GENERICINST => {
                pretty_type(md, r, out)?;
                out.push('<');
                let count = r.u32()?;
                for i in 0..count {
                    if i > 0 {
                        out.push(',');
                    }
                    pretty_type(md, r, out)?;
                }
                out.push('>');
                break;
            }
            ELEMENT_TYPE_CMOD_OPT | ELEMENT_TYPE_CMOD_REQD => {
                let token = r.type_token()?;
                let mut modifier = String::from(if element == ELEMENT_TYPE_CMOD_OPT { " modopt(" } else { " modreq(" });
                pretty_class(md, token, &mut modifier, r)?;
                modifier.push(')');
                appendix.insert_str(0, &modifier);
            }
            ELEMENT_TYPE_PINNED => appendix.insert_str(0, " pinned"),
            ELEMENT_TYPE_PTR => appendix.insert(0, '*'),
            ELEMENT_TYPE_BYREF => appendix.insert(0, '&'),
            0 => break,
            other => {
                let _ = write!(out, "/* UNKNOWN TYPE (0x{other:X})*/");
                break;
            }
        }
    }
    out.push_str(&appendix);
    Some(())
}

/// The bounds of an `ELEMENT_TYPE_ARRAY` as formattype.cpp prints them: `[...]` for a plain rank-1 array,
/// otherwise per dimension its size, or `lower...upper`.
fn pretty_array_shape(r: &mut SigReader, out: &mut String) -> Option<()> {
    let rank = r.u32()?;
    if rank == 0 {
        out.push_str("[BAD: RANK == 0!]");
        return Some(());
    }
    if rank > 64 {
        return None;
    }
    let rank = rank as usize;
    let mut sizes = vec![0i64; rank];
    let mut lower = vec![0i64; rank];
    let num_sizes = r.u32()? as usize;
    for i in 0..num_sizes {
        r.spend()?;
        let size = r.u32()?;
        if let Some(slot) = sizes.get_mut(i) {
            *slot = size as i64;
        }
    }
    let num_lower = r.u32()? as usize;
    for i in 0..num_lower {
        r.spend()?;
        let bound = r.i32()?;
        if let Some(slot) = lower.get_mut(i) {
            *slot = bound as i64;
        }
    }
    out.push('[');
    if rank == 1 && num_sizes == 0 && num_lower == 0 {
        out.push_str("...");
    } else {
        for i in 0..rank {
            if lower[i] == 0 && i < num_sizes {
                let _ = write!(out, "{}", sizes[i] as i32);
            } else if i < num_lower {
                let _ = write!(out, "{}...", lower[i] as i32);
                if i < num_sizes {
                    let _ = write!(out, "{}", (lower[i] + sizes[i] - 1) as i32);
                }
            }
            if i + 1 < rank {
                out.push(',');
            }
        }
    }
    out.push(']');
    Some(())
}

/// `PrettyPrintClass`: a TypeDef, TypeRef or TypeSpec with its enclosing types (`Outer/Inner`) and, for a TypeRef,
/// its resolution scope (`[Assembly]`, `[.module name]`).
fn pretty_class(md: &Metadata, token: Token, out: &mut String, r: &mut SigReader) -> Option<()> {
    r.spend()?;
    if token == 0 {
        out.push_str("[*]");
        return Some(());
    }
    let (table, rid) = (metadata::table_of(token), metadata::rid_of(token));
    let valid = match table {
        0x00 => rid == 1,
        metadata::TYPE_DEF
        | metadata::TYPE_REF
        | metadata::TYPE_SPEC
        | metadata::ASSEMBLY_REF
        | metadata::ASSEMBLY
        | metadata::MODULE_REF => rid >= 1 && rid <= md.rows(table),
        _ => false,
    };
    if !valid {
        if matches!(table, 0x00 | 0x01 | 0x02 | 0x1A | 0x1B | 0x20 | 0x23) {
            let _ = write!(out, " [ERROR: INVALID TOKEN 0x{token:08X}] ");
        } else {
            let _ = write!(out, " [ERROR: INVALID TOKEN TYPE 0x{token:08X}] ");
        }
        return Some(());
    }
    match table {
        metadata::TYPE_DEF | metadata::TYPE_REF => {
            let (encloser, namespace, name) = if table == metadata::TYPE_REF {
                let row = md.type_ref(rid)?;
                (row.scope, row.namespace, row.name)
            } else {
                let row = md.type_def(rid)?;
                let encloser = md
                    .enclosing_type(rid)
                    .map_or(metadata::token(metadata::TYPE_DEF, 0), |e| metadata::token(metadata::TYPE_DEF, e));
                (encloser, row.namespace, row.name)
            };
            if encloser == 0 || metadata::rid_of(encloser) != 0 {
                pretty_class(md, encloser, out, r)?;
                if matches!(metadata::table_of(encloser), metadata::TYPE_DEF | metadata::TYPE_REF) && encloser != 0 {
                    out.push('/');
                }
            }
            let namespace = md.string(namespace);
            if !namespace.is_empty() {
                out.push_str(&namespace);
                out.push('.');
            }
            out.push_str(&md.string(name));
        }
        metadata::ASSEMBLY_REF => {
            let name = md.assembly_ref_name(rid);
            if !name.is_empty() {
                let _ = write!(out, "[{name}]");
            }
        }
        metadata::ASSEMBLY => {
            let _ = write!(out, "[{}]", md.assembly_name());
        }
        metadata::MODULE_REF => {
            let name = md.module_ref_name(rid);
            if !name.is_empty() {
                let _ = write!(out, "[.module {name}]");
            }
        }
        metadata::TYPE_SPEC => {
            let sig = md.type_spec_signature(rid)?;
            let mut inner = SigReader { budget: r.budget, ..SigReader::new(sig) };
            pretty_type(md, &mut inner, out)?;
            r.budget = inner.budget;
        }
        _ => {}
    }
    Some(())
}

// ---------------------------------------------------------------------------------------------------------------
// TypeString: owner type names in reflection spelling (vm/typestring.cpp, FormatNamespace)
// ---------------------------------------------------------------------------------------------------------------

/// Characters `TypeNameBuilder` escapes with a backslash in type names (`IsTypeNameReservedChar`).
fn push_escaped(out: &mut String, name: &str) {
    for c in name.chars() {
        if matches!(c, ',' | '[' | ']' | '&' | '*' | '+' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
}

fn push_namespaced(out: &mut String, namespace: &str, name: &str) {
    if !namespace.is_empty() {
        push_escaped(out, namespace);
        out.push('.');
    }
    push_escaped(out, name);
}

/// A TypeDef as `Namespace.Outer+Inner` (no instantiation).
pub fn type_def_name(md: &Metadata, rid: u32, out: &mut String) -> Option<()> {
    let mut chain = vec![rid];
    let mut current = rid;
    while let Some(enclosing) = md.enclosing_type(current) {
        if chain.len() >= 64 || chain.contains(&enclosing) {
            return None;
        }
        chain.push(enclosing);
        current = enclosing;
    }
    for (i, &rid) in chain.iter().rev().enumerate() {
        let row = md.type_def(rid)?;
        if i > 0 {
            out.push('+');
        }
        push_namespaced(out, &md.string(row.namespace), &md.string(row.name));
    }
    Some(())
}

/// A TypeRef as `Namespace.Outer+Inner` (the name the TypeDef it resolves to has).
fn type_ref_name(md: &Metadata, rid: u32, out: &mut String, depth: u32) -> Option<()> {
    if depth > 64 {
        return None;
    }
    let row = md.type_ref(rid)?;
    if metadata::table_of(row.scope) == metadata::TYPE_REF && metadata::rid_of(row.scope) != 0 {
        type_ref_name(md, metadata::rid_of(row.scope), out, depth + 1)?;
        out.push('+');
    }
    push_namespaced(out, &md.string(row.namespace), &md.string(row.name));
    Some(())
}

/// Where the metadata of the modules a ReadyToRun signature names comes from: index 0 is the image's own module,
/// other indexes follow `READYTORUN_FIXUP_ModuleOverride` numbering (AssemblyRefs, then the manifest metadata).
pub trait Modules {
    fn module(&self, index: u32) -> Option<&Metadata>;
}

/// Decodes (and, with `out`, names) one ReadyToRun type signature in TypeString spelling. Types of modules that
/// `modules` cannot supply print as `?`; `None` means the signature itself is malformed.
pub fn r2r_type(
    modules: &dyn Modules,
    module: u32,
    outer: u32,
    r: &mut SigReader,
    mut out: Option<&mut String>,
) -> Option<()> {
    r.spend()?;
    let element = r.byte()?;
    let primitive = match element {
        ELEMENT_TYPE_VOID => "System.Void",
        ELEMENT_TYPE_BOOLEAN => "System.Boolean",
        ELEMENT_TYPE_CHAR => "System.Char",
        ELEMENT_TYPE_I1 => "System.SByte",
        ELEMENT_TYPE_U1 => "System.Byte",
        ELEMENT_TYPE_I2 => "System.Int16",
        ELEMENT_TYPE_U2 => "System.UInt16",
        ELEMENT_TYPE_I4 => "System.Int32",
        ELEMENT_TYPE_U4 => "System.UInt32",
        ELEMENT_TYPE_I8 => "System.Int64",
        ELEMENT_TYPE_U8 => "System.UInt64",
        ELEMENT_TYPE_R4 => "System.Single",
        ELEMENT_TYPE_R8 => "System.Double",
        ELEMENT_TYPE_STRING => "System.String",
        ELEMENT_TYPE_OBJECT => "System.Object",
        ELEMENT_TYPE_I => "System.IntPtr",
        ELEMENT_TYPE_U => "System.UIntPtr",
        ELEMENT_TYPE_TYPEDBYREF => "System.TypedReference",
        ELEMENT_TYPE_CANON_ZAPSIG => "System.__Canon",
        _ => "",
    };
    if !primitive.is_empty() {
        if let Some(out) = out {
            out.push_str(primitive);
        }
        return Some(());
    }
    match element {
        ELEMENT_TYPE_CLASS | ELEMENT_TYPE_VALUETYPE => {
            let token = r.type_token()?;
            if let Some(out) = out {
                named_token(modules, module, token, r, out);
            }
        }
        ELEMENT_TYPE_GENERICINST => {
            // The generic type's token is in `module`; its arguments are back in the outer context.
            r2r_type(modules, module, outer, r, out.as_deref_mut())?;
            let count = r.u32()?;
            if let Some(out) = out.as_deref_mut() {
                out.push('[');
            }
            for i in 0..count {
                if i > 0 {
                    if let Some(out) = out.as_deref_mut() {
                        out.push(',');
                    }
                }
                r2r_type(modules, outer, outer, r, out.as_deref_mut())?;
            }
            if let Some(out) = out {
                out.push(']');
            }
        }
        ELEMENT_TYPE_SZARRAY | ELEMENT_TYPE_PTR | ELEMENT_TYPE_BYREF => {
            r2r_type(modules, module, outer, r, out.as_deref_mut())?;
            if let Some(out) = out {
                out.push_str(match element {
                    ELEMENT_TYPE_SZARRAY => "[]",
                    ELEMENT_TYPE_PTR => "*",
                    _ => "&",
                });
            }
        }
        ELEMENT_TYPE_ARRAY => {
            r2r_type(modules, module, outer, r, out.as_deref_mut())?;
            let rank = r.u32()?;
            let sizes = r.u32()?;
            for _ in 0..sizes {
                r.spend()?;
                r.u32()?;
            }
            let bounds = r.u32()?;
            for _ in 0..bounds {
                r.spend()?;
                r.u32()?;
            }
            if let Some(out) = out {
                if rank <= 1 {
                    out.push_str("[*]");
                } else {
                    out.push('[');
                    for _ in 1..rank.min(64) {
                        out.push(',');
                    }
                    out.push(']');
                }
            }
        }
        ELEMENT_TYPE_VAR | ELEMENT_TYPE_MVAR => {
            let index = r.u32()?;
            if let Some(out) = out {
                let _ = write!(out, "{}{index}", if element == ELEMENT_TYPE_VAR { "!" } else { "!!" });
            }
        }
        ELEMENT_TYPE_CMOD_OPT | ELEMENT_TYPE_CMOD_REQD => {
            r.type_token()?;
            r2r_type(modules, module, outer, r, out)?;
        }
        ELEMENT_TYPE_PINNED => r2r_type(modules, module, outer, r, out)?,
        ELEMENT_TYPE_MODULE_ZAPSIG => {
            let override_module = r.u32()?;
            r.modules_seen.push(override_module);
            r2r_type(modules, override_module, outer, r, out)?;
        }
        ELEMENT_TYPE_NATIVE_VALUETYPE_ZAPSIG => {
            if let Some(out) = out.as_deref_mut() {
                out.push_str("VALUETYPE");
            }
            r2r_type(modules, module, outer, r, out)?;
        }
        ELEMENT_TYPE_FNPTR => {
            skip_method_signature(modules, module, r)?;
            if let Some(out) = out {
                out.push_str("(fnptr)");
            }
        }
        _ => return None,
    }
    Some(())
}

fn skip_method_signature(modules: &dyn Modules, module: u32, r: &mut SigReader) -> Option<()> {
    let call_conv = r.u32()?;
    if call_conv & CALLCONV_GENERIC != 0 {
        r.u32()?;
    }
    let count = r.u32()?;
    r2r_type(modules, module, module, r, None)?;
    for _ in 0..count {
        if r.peek() == Some(ELEMENT_TYPE_SENTINEL) {
            r.byte();
        }
        r2r_type(modules, module, module, r, None)?;
    }
    Some(())
}

/// A TypeDef/TypeRef/TypeSpec token of `module` in TypeString spelling, `?` when that module is not available.
fn named_token(modules: &dyn Modules, module: u32, token: Token, r: &mut SigReader, out: &mut String) {
    let Some(md) = modules.module(module) else {
        out.push('?');
        return;
    };
    let rid = metadata::rid_of(token);
    let ok = match metadata::table_of(token) {
        metadata::TYPE_DEF => type_def_name(md, rid, out),
        metadata::TYPE_REF => type_ref_name(md, rid, out, 0),
        metadata::TYPE_SPEC => md.type_spec_signature(rid).and_then(|sig| {
            // A TypeSpec's own tokens live in the module that holds it.
            let mut inner = SigReader { budget: r.budget, ..SigReader::new(sig) };
            let done = r2r_type(&Single(md), 0, 0, &mut inner, Some(out));
            r.budget = inner.budget;
            done
        }),
        _ => None,
    };
    if ok.is_none() {
        out.push('?');
    }
}

/// One module on its own, for signatures whose tokens are all local (TypeSpec blobs).
struct Single<'m>(&'m Metadata);

impl Modules for Single<'_> {
    fn module(&self, index: u32) -> Option<&Metadata> {
        (index == 0).then_some(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Metadata with no rows at all: enough for signatures made of primitives (tokens print as invalid).
    fn empty_metadata() -> Metadata {
        let mut blob = Vec::new();
        blob.extend_from_slice(&0x424A_5342u32.to_le_bytes()); // BSJB
        blob.extend_from_slice(&[1, 0, 1, 0, 0, 0, 0, 0]); // major, minor, reserved
        blob.extend_from_slice(&4u32.to_le_bytes());
        blob.extend_from_slice(b"v4\0\0");
        blob.extend_from_slice(&[0, 0, 1, 0]); // flags, one stream
        blob.extend_from_slice(&36u32.to_le_bytes());
        blob.extend_from_slice(&24u32.to_le_bytes());
        blob.extend_from_slice(b"#~\0\0");
        blob.extend_from_slice(&[0; 24]); // table stream header: no tables
        Metadata::parse(&blob).unwrap()
    }

    fn method(sig: &[u8]) -> String {
        full_method_name(&empty_metadata(), sig, "A", "N.T", "M").unwrap()
    }

    #[test]
    fn method_signatures_in_the_runtime_spelling() {
        assert_eq!(method(&[0x20, 0x02, 0x08, 0x03, 0x08]), "instance int32 [A] N.T::M(char,int32)");
        assert_eq!(method(&[0x00, 0x01, 0x01, 0x10, 0x1d, 0x08]), "void [A] N.T::M(int32[]&)");
        assert_eq!(method(&[0x00, 0x01, 0x01, 0x0f, 0x0f, 0x03]), "void [A] N.T::M(char**)");
        assert_eq!(method(&[0x10, 0x01, 0x01, 0x1e, 0x00, 0x1d, 0x13, 0x01]), "!!0 [A] N.T::M(!1[])");
        assert_eq!(
            method(&[0x00, 0x01, 0x19, 0x14, 0x08, 0x02, 0x00, 0x02, 0x00, 0x00]),
            "native uint [A] N.T::M(int32[0...,0...])"
        );
        assert_eq!(method(&[0x00, 0x01, 0x01, 0x1b, 0x00, 0x01, 0x01, 0x08]), "void [A] N.T::M(method void *(int32))");
        assert_eq!(method(&[0x05, 0x02, 0x01, 0x08, 0x41, 0x0a]), "vararg void [A] N.T::M(int32,...,int64)");
        // Tokens the metadata lacks print as the runtime prints them, without failing the name.
        assert_eq!(
            method(&[0x00, 0x01, 0x01, 0x12, 0x14]),
            "void [A] N.T::M(class  [ERROR: INVALID TOKEN 0x02000005] )"
        );
        // More parameters announced than present.
        assert_eq!(method(&[0x00, 0x02, 0x01, 0x08]), "void [A] N.T::M(int32 [SIGNATURE ENDED PREMATURELY])");
    }

    #[test]
    fn malformed_signatures_fail_cleanly() {
        let md = empty_metadata();
        for sig in [&[][..], &[0x00], &[0x00, 0x01], &[0x00, 0x01, 0x01, 0x1d], &[0x00, 0x01, 0x01, 0x15, 0x15, 0x15]] {
            assert_eq!(full_method_name(&md, sig, "A", "T", "M"), None, "{sig:x?}");
        }
        // Nesting deeper than the node budget allows.
        let mut deep = vec![0x00, 0x01, 0x01];
        deep.extend(std::iter::repeat_n(0x1d, 10_000));
        deep.push(0x08);
        assert_eq!(full_method_name(&md, &deep, "A", "T", "M"), None);
    }

    struct None_;
    impl Modules for None_ {
        fn module(&self, _: u32) -> Option<&Metadata> {
            None
        }
    }

    fn r2r(sig: &[u8]) -> Option<String> {
        let mut out = String::new();
        r2r_type(&None_, 0, 0, &mut SigReader::new(sig), Some(&mut out))?;
        Some(out)
    }

    #[test]
    fn r2r_types_in_typestring_spelling() {
        assert_eq!(r2r(&[0x1d, 0x08]).unwrap(), "System.Int32[]");
        assert_eq!(r2r(&[0x3e]).unwrap(), "System.__Canon");
        assert_eq!(r2r(&[0x14, 0x0e, 0x02, 0x00, 0x00]).unwrap(), "System.String[,]");
        assert_eq!(r2r(&[0x0f, 0x19]).unwrap(), "System.UIntPtr*");
        // A module we cannot read: the type prints as `?`, the rest of the signature still decodes.
        assert_eq!(r2r(&[0x3f, 0x05, 0x12, 0x08]).unwrap(), "?");
        assert_eq!(r2r(&[0x3f]), None);
        assert_eq!(r2r(&[0x55]), None);
    }
}

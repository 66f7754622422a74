//! A compact ECMA-335 metadata reader (partition II §24: the BSJB root, the `#~` table stream, `#Strings` and
//! `#Blob`), reading only the tables that naming code needs: Module, TypeRef, TypeDef, MethodDef, MemberRef,
//! TypeSpec, ModuleRef, Assembly, AssemblyRef and NestedClass.
//!
//! Written by hand rather than with a crate: the maintained readers are either large frameworks (dotscope: an
//! analysis toolkit needing a newer Rust), GPL-licensed (dotnetdll) or Windows-metadata specific
//! (windows-metadata), and none reads lazily out of a borrowed buffer with a no-panic guarantee on hostile input,
//! which matters here: CoreLib has ~60k methods and we name only the ones a profile hits.
//!
//! Column widths follow §24.2.6: heap indexes are 2 or 4 bytes by the `HeapSizes` bits, table indexes 2 bytes
//! while the target has fewer than 2^16 rows, coded indexes 2 bytes while every target table has fewer than
//! 2^(16 − tag bits) rows. All tables up to GenericParamConstraint (0x2C) are sized so later ones can be located.

use std::borrow::Cow;

/// A metadata token: table number in the top byte, row id (1-based) below.
pub type Token = u32;

pub const TYPE_REF: u8 = 0x01;
pub const TYPE_DEF: u8 = 0x02;
pub const METHOD_DEF: u8 = 0x06;
pub const MEMBER_REF: u8 = 0x0A;
pub const MODULE_REF: u8 = 0x1A;
pub const TYPE_SPEC: u8 = 0x1B;
pub const ASSEMBLY: u8 = 0x20;
pub const ASSEMBLY_REF: u8 = 0x23;
const MODULE: u8 = 0x00;
const NESTED_CLASS: u8 = 0x29;
const TABLE_COUNT: usize = 0x2D;

pub fn token(table: u8, rid: u32) -> Token {
    ((table as u32) << 24) | (rid & 0x00FF_FFFF)
}

pub fn table_of(token: Token) -> u8 {
    (token >> 24) as u8
}

pub fn rid_of(token: Token) -> u32 {
    token & 0x00FF_FFFF
}

/// Coded index kinds (§24.2.6): the tables a tag selects, in tag order (`None` = unused tag value).
#[derive(Clone, Copy)]
enum Coded {
    TypeDefOrRef,
    HasConstant,
    HasCustomAttribute,
    HasFieldMarshal,
    HasDeclSecurity,
    MemberRefParent,
    HasSemantics,
    MethodDefOrRef,
    MemberForwarded,
    Implementation,
    CustomAttributeType,
    ResolutionScope,
    TypeOrMethodDef,
}

impl Coded {
    fn tables(self) -> &'static [Option<u8>] {
        match self {
            Coded::TypeDefOrRef => &[Some(TYPE_DEF), Some(TYPE_REF), Some(TYPE_SPEC)],
            Coded::HasConstant => &[Some(0x04), Some(0x08), Some(0x17)],
            Coded::HasCustomAttribute => &[
                Some(METHOD_DEF),
                Some(0x04),
                Some(TYPE_REF),
                Some(TYPE_DEF),
                Some(0x08),
                Some(0x09),
                Some(MEMBER_REF),
                Some(MODULE),
                Some(0x0E),
                Some(0x17),
                Some(0x14),
                Some(0x11),
                Some(MODULE_REF),
                Some(TYPE_SPEC),
                Some(ASSEMBLY),
                Some(ASSEMBLY_REF),
                Some(0x26),
                Some(0x27),
                Some(0x28),
                Some(0x2A),
                Some(0x2C),
                Some(0x2B),
            ],
            Coded::HasFieldMarshal => &[Some(0x04), Some(0x08)],
            Coded::HasDeclSecurity => &[Some(TYPE_DEF), Some(METHOD_DEF), Some(ASSEMBLY)],
            Coded::MemberRefParent => {
                &[Some(TYPE_DEF), Some(TYPE_REF), Some(MODULE_REF), Some(METHOD_DEF), Some(TYPE_SPEC)]
            }
            Coded::HasSemantics => &[Some(0x14), Some(0x17)],
            Coded::MethodDefOrRef => &[Some(METHOD_DEF), Some(MEMBER_REF)],
            Coded::MemberForwarded => &[Some(0x04), Some(METHOD_DEF)],
            Coded::Implementation => &[Some(0x26), Some(ASSEMBLY_REF), Some(0x27)],
            Coded::CustomAttributeType => &[None, None, Some(METHOD_DEF), Some(MEMBER_REF), None],
            Coded::ResolutionScope => &[Some(MODULE), Some(MODULE_REF), Some(ASSEMBLY_REF), Some(TYPE_REF)],
            Coded::TypeOrMethodDef => &[Some(TYPE_DEF), Some(METHOD_DEF)],
        }
    }

    fn tag_bits(self) -> u32 {
        let n = self.tables().len() as u32;
        32 - (n - 1).leading_zeros()
    }
}

#[derive(Clone, Copy)]
enum Col {
    U16,
    U32,
    Str,
    Guid,
    Blob,
    Index(u8),
    Coded(Coded),
}

use Col::*;

/// Columns of tables 0x00..=0x2C (§22).
fn schema(table: usize) -> &'static [Col] {
    match table {
        0x00 => &[U16, Str, Guid, Guid, Guid],
        0x01 => &[Coded(Coded::ResolutionScope), Str, Str],
        0x02 => &[U32, Str, Str, Coded(Coded::TypeDefOrRef), Index(0x04), Index(METHOD_DEF)],
        0x03 => &[Index(0x04)],
        0x04 => &[U16, Str, Blob],
        0x05 => &[Index(METHOD_DEF)],
        0x06 => &[U32, U16, U16, Str, Blob, Index(0x08)],
        0x07 => &[Index(0x08)],
        0x08 => &[U16, U16, Str],
        0x09 => &[Index(TYPE_DEF), Coded(Coded::TypeDefOrRef)],
        0x0A => &[Coded(Coded::MemberRefParent), Str, Blob],
        0x0B => &[U16, Coded(Coded::HasConstant), Blob],
        0x0C => &[Coded(Coded::HasCustomAttribute), Coded(Coded::CustomAttributeType), Blob],
        0x0D => &[Coded(Coded::HasFieldMarshal), Blob],
        0x0E => &[U16, Coded(Coded::HasDeclSecurity), Blob],
        0x0F => &[U16, U32, Index(TYPE_DEF)],
        0x10 => &[U32, Index(0x04)],
        0x11 => &[Blob],
        0x12 => &[Index(TYPE_DEF), Index(0x14)],
        0x13 => &[Index(0x14)],
        0x14 => &[U16, Str, Coded(Coded::TypeDefOrRef)],
        0x15 => &[Index(TYPE_DEF), Index(0x17)],
        0x16 => &[Index(0x17)],
        0x17 => &[U16, Str, Blob],
        0x18 => &[U16, Index(METHOD_DEF), Coded(Coded::HasSemantics)],
        0x19 => &[Index(TYPE_DEF), Coded(Coded::MethodDefOrRef), Coded(Coded::MethodDefOrRef)],
        0x1A => &[Str],
        0x1B => &[Blob],
        0x1C => &[U16, Coded(Coded::MemberForwarded), Str, Index(MODULE_REF)],
        0x1D => &[U32, Index(0x04)],
        0x1E => &[U32, U32],
        0x1F => &[U32],
        0x20 => &[U32, U16, U16, U16, U16, U32, Blob, Str, Str],
        0x21 => &[U32],
        0x22 => &[U32, U32, U32],
        0x23 => &[U16, U16, U16, U16, U32, Blob, Str, Str, Blob],
        0x24 => &[U32, Index(ASSEMBLY_REF)],
        0x25 => &[U32, U32, U32, Index(ASSEMBLY_REF)],
        0x26 => &[U32, Str, Blob],
        0x27 => &[U32, U32, Str, Str, Coded(Coded::Implementation)],
        0x28 => &[U32, U32, Str, Coded(Coded::Implementation)],
        0x29 => &[Index(TYPE_DEF), Index(TYPE_DEF)],
        0x2A => &[U16, U16, Coded(Coded::TypeOrMethodDef), Str],
        0x2B => &[Coded(Coded::MethodDefOrRef), Blob],
        0x2C => &[Index(0x2A), Coded(Coded::TypeDefOrRef)],
        _ => &[],
    }
}

#[derive(Clone, Copy, Default)]
struct Table {
    rows: u32,
    /// Offset of row 1 in `bytes`.
    start: usize,
    row_size: usize,
    /// Offset of each column within a row (at most 9 columns).
    col_offsets: [u8; 9],
    col_widths: [u8; 9],
}

/// One assembly's metadata, owning a copy of the metadata blob.
pub struct Metadata {
    bytes: Box<[u8]>,
    strings: (usize, usize),
    blobs: (usize, usize),
    tables: [Table; TABLE_COUNT],
    /// `method_list` start of every TypeDef, for MethodDef → declaring type.
    type_method_starts: Vec<u32>,
    /// `(nested, enclosing)` TypeDef rids, sorted by nested.
    nested: Vec<(u32, u32)>,
}

pub struct TypeDefRow {
    pub name: u32,
    pub namespace: u32,
}

pub struct TypeRefRow {
    pub scope: Token,
    pub name: u32,
    pub namespace: u32,
}

pub struct MethodDefRow {
    /// `MethodAttributes` (§II.23.1.10).
    pub flags: u16,
    pub name: u32,
    pub signature: u32,
}

/// `MethodAttributes.Virtual`.
pub const METHOD_VIRTUAL: u16 = 0x0040;

pub struct MemberRefRow {
    pub parent: Token,
    pub name: u32,
    pub signature: u32,
}

fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// ECMA-335 §II.23.2 compressed unsigned integer: `(value, bytes used)`.
pub fn compressed_u32(b: &[u8]) -> Option<(u32, usize)> {
    let b0 = *b.first()? as u32;
    if b0 & 0x80 == 0 {
        Some((b0, 1))
    } else if b0 & 0xC0 == 0x80 {
        Some((((b0 & 0x3F) << 8) | *b.get(1)? as u32, 2))
    } else if b0 & 0xE0 == 0xC0 {
        let rest = b.get(1..4)?;
        Some((((b0 & 0x1F) << 24) | (rest[0] as u32) << 16 | (rest[1] as u32) << 8 | rest[2] as u32, 4))
    } else {
        None
    }
}

impl Metadata {
    /// Parses a metadata blob (the bytes the CLI header's MetaData directory points to).
    pub fn parse(blob: &[u8]) -> Result<Metadata, String> {
        let bytes: Box<[u8]> = blob.into();
        let b = &bytes[..];
        if read_u32(b, 0) != Some(0x424A_5342) {
            return Err("no BSJB metadata signature".into());
        }
        let version_len = read_u32(b, 12).ok_or("metadata root is cut short")? as usize;
        let mut at = 16usize.checked_add(version_len).ok_or("bad metadata version length")?;
        let stream_count = read_u16(b, at + 2).ok_or("metadata root is cut short")?;
        at += 4;
        let (mut tables_stream, mut strings, mut blobs) = (None, (0, 0), (0, 0));
        for _ in 0..stream_count {
            let offset = read_u32(b, at).ok_or("metadata stream header is cut short")? as usize;
            let size = read_u32(b, at + 4).ok_or("metadata stream header is cut short")? as usize;
            let name_start = at + 8;
            let name_len = b.get(name_start..).and_then(|s| s.iter().take(32).position(|&c| c == 0));
            let name_len = name_len.ok_or("bad metadata stream name")?;
            let name = &b[name_start..name_start + name_len];
            at = name_start + (name_len + 4) / 4 * 4;
            let end = offset.checked_add(size).filter(|&e| e <= b.len()).ok_or("metadata stream out of bounds")?;
            match name {
                b"#~" | b"#-" => tables_stream = Some((offset, end)),
                b"#Strings" => strings = (offset, end),
                b"#Blob" => blobs = (offset, end),
                _ => {}
            }
        }
        let (tables_at, tables_end) = tables_stream.ok_or("metadata has no #~ table stream")?;
        let heap_sizes = *b.get(tables_at + 6).ok_or("table stream is cut short")?;
        let valid = u64::from_le_bytes(
            b.get(tables_at + 8..tables_at + 16).ok_or("table stream is cut short")?.try_into().unwrap_or([0; 8]),
        );
        let mut rows = [0u32; 64];
        let mut at = tables_at + 24;
        for (table, count) in rows.iter_mut().enumerate() {
            if valid & (1u64 << table) != 0 {
                *count = read_u32(b, at).ok_or("table row counts are cut short")?;
                if *count > 0x00FF_FFFF {
                    return Err(format!("metadata table {table:#x} claims {count} rows", count = *count));
                }
                at += 4;
            }
        }
        // Uncompressed (#-) streams written by edit-and-continue can carry 4 extra bytes here.
        if heap_sizes & 0x40 != 0 {
            at += 4;
        }
        let str_width = if heap_sizes & 1 != 0 { 4 } else { 2 };
        let guid_width = if heap_sizes & 2 != 0 { 4 } else { 2 };
        let blob_width = if heap_sizes & 4 != 0 { 4 } else { 2 };
        let width = |col: Col| -> u8 {
            match col {
                U16 => 2,
                U32 => 4,
                Str => str_width,
                Guid => guid_width,
                Blob => blob_width,
                Index(t) => {
                    if rows[t as usize] < 0x1_0000 {
                        2
                    } else {
                        4
                    }
                }
                Coded(kind) => {
                    let max = kind.tables().iter().flatten().map(|&t| rows[t as usize]).max().unwrap_or(0);
                    if max < (1u32 << (16 - kind.tag_bits())) {
                        2
                    } else {
                        4
                    }
                }
            }
        };
        let mut tables = [Table::default(); TABLE_COUNT];
        for (index, table) in tables.iter_mut().enumerate() {
            let mut row_size = 0usize;
            for (i, &col) in schema(index).iter().enumerate() {
                table.col_offsets[i] = row_size as u8;
                table.col_widths[i] = width(col);
                row_size += width(col) as usize;
            }
            table.rows = rows[index];
            table.start = at;
            table.row_size = row_size;
            at = at
                .checked_add(row_size.checked_mul(rows[index] as usize).ok_or("table size overflows")?)
                .ok_or("table size overflows")?;
        }
        // Tables past 0x2C (none in an ordinary assembly) come after ours and need no sizing.
        if at > tables_end {
            return Err("metadata tables run past their stream".into());
        }
        let mut md = Metadata { bytes, strings, blobs, tables, type_method_starts: Vec::new(), nested: Vec::new() };
        md.type_method_starts = (1..=md.tables[TYPE_DEF as usize].rows).map(|rid| md.col(TYPE_DEF, rid, 5)).collect();
        md.nested = (1..=md.tables[NESTED_CLASS as usize].rows)
            .map(|rid| (md.col(NESTED_CLASS, rid, 0), md.col(NESTED_CLASS, rid, 1)))
            .collect();
        md.nested.sort_unstable();
        Ok(md)
    }

    pub fn rows(&self, table: u8) -> u32 {
        self.tables.get(table as usize).map_or(0, |t| t.rows)
    }

    /// Column `col` of row `rid` (1-based) as an integer; 0 when out of range (0 is never a valid heap string,
    /// blob or row reference, so callers treat it as "absent").
    fn col(&self, table: u8, rid: u32, col: usize) -> u32 {
        let Some(t) = self.tables.get(table as usize) else { return 0 };
        if rid == 0 || rid > t.rows || col >= schema(table as usize).len() {
            return 0;
        }
        let at = t.start + (rid as usize - 1) * t.row_size + t.col_offsets[col] as usize;
        match t.col_widths[col] {
            2 => read_u16(&self.bytes, at).map_or(0, u32::from),
            _ => read_u32(&self.bytes, at).unwrap_or(0),
        }
    }

    fn coded(&self, table: u8, rid: u32, col: usize) -> Token {
        let Some(Coded(kind)) = schema(table as usize).get(col).copied() else { return 0 };
        let raw = self.col(table, rid, col);
        let bits = kind.tag_bits();
        match kind.tables().get((raw & ((1 << bits) - 1)) as usize) {
            Some(Some(t)) => token(*t, raw >> bits),
            _ => 0,
        }
    }

    /// A `#Strings` entry (UTF-8, NUL-terminated); empty when out of range.
    pub fn string(&self, index: u32) -> Cow<'_, str> {
        let (start, end) = self.strings;
        let Some(at) = start.checked_add(index as usize).filter(|&a| a < end) else { return Cow::Borrowed("") };
        let rest = &self.bytes[at..end];
        let len = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        String::from_utf8_lossy(&rest[..len])
    }

    /// A `#Blob` entry (compressed length prefix).
    pub fn blob(&self, index: u32) -> Option<&[u8]> {
        let (start, end) = self.blobs;
        let at = start.checked_add(index as usize).filter(|&a| a < end)?;
        let (len, used) = compressed_u32(&self.bytes[at..end])?;
        self.bytes.get(at + used..(at + used).checked_add(len as usize)?.min(end))
    }

    pub fn type_def(&self, rid: u32) -> Option<TypeDefRow> {
        (rid >= 1 && rid <= self.rows(TYPE_DEF))
            .then(|| TypeDefRow { name: self.col(TYPE_DEF, rid, 1), namespace: self.col(TYPE_DEF, rid, 2) })
    }

    pub fn type_ref(&self, rid: u32) -> Option<TypeRefRow> {
        (rid >= 1 && rid <= self.rows(TYPE_REF)).then(|| TypeRefRow {
            scope: self.coded(TYPE_REF, rid, 0),
            name: self.col(TYPE_REF, rid, 1),
            namespace: self.col(TYPE_REF, rid, 2),
        })
    }

    pub fn method_def(&self, rid: u32) -> Option<MethodDefRow> {
        (rid >= 1 && rid <= self.rows(METHOD_DEF)).then(|| MethodDefRow {
            flags: self.col(METHOD_DEF, rid, 2) as u16,
            name: self.col(METHOD_DEF, rid, 3),
            signature: self.col(METHOD_DEF, rid, 4),
        })
    }

    pub fn member_ref(&self, rid: u32) -> Option<MemberRefRow> {
        (rid >= 1 && rid <= self.rows(MEMBER_REF)).then(|| MemberRefRow {
            parent: self.coded(MEMBER_REF, rid, 0),
            name: self.col(MEMBER_REF, rid, 1),
            signature: self.col(MEMBER_REF, rid, 2),
        })
    }

    pub fn type_spec_signature(&self, rid: u32) -> Option<&[u8]> {
        (rid >= 1 && rid <= self.rows(TYPE_SPEC)).then(|| self.blob(self.col(TYPE_SPEC, rid, 0)))?
    }

    pub fn module_ref_name(&self, rid: u32) -> Cow<'_, str> {
        self.string(self.col(MODULE_REF, rid, 0))
    }

    pub fn assembly_ref_name(&self, rid: u32) -> Cow<'_, str> {
        self.string(self.col(ASSEMBLY_REF, rid, 6))
    }

    /// The assembly's simple name (Assembly table), else the module name without its extension.
    pub fn assembly_name(&self) -> String {
        if self.rows(ASSEMBLY) >= 1 {
            return self.string(self.col(ASSEMBLY, 1, 7)).into_owned();
        }
        let module = self.string(self.col(MODULE, 1, 1));
        module.strip_suffix(".dll").unwrap_or(&module).to_string()
    }

    /// The TypeDef that declares MethodDef `rid`: the last type whose method list starts at or before it.
    pub fn declaring_type(&self, method_rid: u32) -> Option<u32> {
        let after = self.type_method_starts.partition_point(|&start| start <= method_rid);
        // Types with empty method lists share a start with the next type: take the last of those.
        (after > 0).then_some(after as u32)
    }

    pub fn enclosing_type(&self, type_rid: u32) -> Option<u32> {
        let i = self.nested.binary_search_by_key(&type_rid, |&(nested, _)| nested).ok()?;
        Some(self.nested[i].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressed_integers() {
        assert_eq!(compressed_u32(&[0x03]), Some((3, 1)));
        assert_eq!(compressed_u32(&[0x80, 0x80]), Some((0x80, 2)));
        assert_eq!(compressed_u32(&[0xC0, 0x00, 0x40, 0x00]), Some((0x4000, 4)));
        assert_eq!(compressed_u32(&[0xC0, 0x00]), None);
        assert_eq!(compressed_u32(&[0xFF]), None);
    }

    #[test]
    fn coded_index_tag_bits() {
        assert_eq!(Coded::TypeDefOrRef.tag_bits(), 2);
        assert_eq!(Coded::HasCustomAttribute.tag_bits(), 5);
        assert_eq!(Coded::MemberRefParent.tag_bits(), 3);
        assert_eq!(Coded::CustomAttributeType.tag_bits(), 3);
        assert_eq!(Coded::MethodDefOrRef.tag_bits(), 1);
    }

    #[test]
    fn rejects_garbage() {
        assert!(Metadata::parse(b"not metadata").is_err());
        assert!(Metadata::parse(&[]).is_err());
    }
}

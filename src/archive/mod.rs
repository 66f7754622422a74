//! `prof.tar.gz`: packing the outputs and what names their frames into one gzip-compressed tar while they are being
//! made ([`tarball`], with the segment compressors of [`deflate`]; CRCs of segments made apart are joined by
//! `crc32fast`), and unpacking an
//! archive that may come from anywhere without letting it write outside its folder ([`extract`]).
//!
//! This stage knows nothing of profiles: it packs bytes and files. What it is told about repeated text comes as
//! [`crate::repeats`] hints.

pub mod deflate;
pub mod extract;
pub mod tarball;

pub use extract::extract_into;

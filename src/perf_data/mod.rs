//! perf.data, the file format of Linux `perf`: profcpu writes it while recording and reads it (its own or one
//! written by `perf record`) to build every report.

pub mod abi;
pub mod attr;
mod bytes;
pub mod echoes;
pub mod header;
pub mod pager;
pub mod reader;
pub mod records;
pub mod sample;
pub mod tracing;
pub mod writer;

pub use attr::Attr;
pub use header::{BuildIdEntry, EventDesc, Features};
pub use pager::{with_pager, Pager};
pub use reader::{PerfDataReader, ReadStats, SampleFormats, Skimmed};
pub use records::{Comm, Lost, Mmap, Record, Switch, Task};
pub use sample::{Sample, SampleFields, SampleFormat, SampleId, UserContext, UserFields};
pub use writer::{PerfDataWriter, WriteProgress, Written};

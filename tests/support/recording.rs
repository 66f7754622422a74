//! A perf.data read back with profcpu's own reader, after checking that it reads cleanly.

use profcpu::perf_data::{PerfDataReader, Record};
use std::path::Path;

/// Everything our own reader finds in a perf.data, after checking the file reads cleanly.
pub struct Recording {
    pub reader: PerfDataReader,
    pub records: Vec<Record>,
}

/// A perf.data opened as `postprocess` opens it: the file, then [`PerfDataReader::from_file`].
pub fn open_perf_data(path: &Path) -> anyhow::Result<PerfDataReader> {
    let file = std::fs::File::open(path)?;
    PerfDataReader::from_file(&file, path)
}

impl Recording {
    pub fn read(path: &Path) -> Recording {
        let reader = open_perf_data(path).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(reader.warnings().is_empty(), "reader warnings: {:?}", reader.warnings());
        let mut records = Vec::new();
        let stats = reader
            .for_each_record(|r| {
                records.push(r);
                Ok(())
            })
            .unwrap();
        assert_eq!((stats.undecodable, stats.truncated_bytes), (0, 0), "{stats:?}");
        Recording { reader, records }
    }

    pub fn samples(&self) -> impl Iterator<Item = &profcpu::perf_data::Sample> {
        self.records.iter().filter_map(|r| if let Record::Sample(s) = r { Some(s) } else { None })
    }
}

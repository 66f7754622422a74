//! A recording named by the symbolizer as the pipeline does it (every sample in time order), kept in memory.

use profcpu::perf_data::PerfDataReader;
use profcpu::symbolize::{ResolvedSample, SymbolizeOptions, SymbolizeStats, Symbolizer};

#[derive(Debug)]
pub struct Named {
    pub samples: Vec<ResolvedSample>,
    pub stats: SymbolizeStats,
}

pub fn name_samples(reader: &PerfDataReader, opts: &SymbolizeOptions) -> anyhow::Result<Named> {
    let mut samples = Vec::new();
    let stats = Symbolizer::new(opts)?.for_each_sample(reader, |s| {
        samples.push(s);
        Ok(())
    })?;
    Ok(Named { samples, stats })
}

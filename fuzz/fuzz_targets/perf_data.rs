//! perf.data as `postprocess` reads it (from profcpu, `perf record`, or anyone): the file header, the attr section,
//! the feature sections, then every record of the data section — decoded in file order, skimmed for times and
//! decoded again by offset, as the symbolizer does.
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::perf_data::{PerfDataReader, Record, Sample, Skimmed};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let file = profcpu_fuzz::memfd(data);
    let Ok(reader) = PerfDataReader::from_file(&file, Path::new("fuzz.perf.data")) else { return };
    let _ = (reader.warnings(), reader.features(), reader.header());
    for event in reader.events() {
        let _ = (event.attr.sample_format(), event.attr.event_name(), event.attr.is_freq());
    }
    let mut offsets = Vec::new();
    let full = reader.for_each_record_at(|offset, record| {
        if let Record::Sample(s) = &record {
            let _ = &reader.events()[reader.sample_formats().event_index(s.id)];
        }
        offsets.push((offset, record));
        Ok(())
    });
    // One sample decoded into again and again, as the symbolizer's replay does.
    let mut again = Sample::default();
    let skimmed = reader.skim_records(|offset, entry| {
        match entry {
            Skimmed::Sample { .. } => {
                // Located by the skim: decoding it by its offset gives what the full walk gave there (the stack
                // copy as it lies in the file).
                let decoded = reader.sample_at(offset, &mut again).map(<[u8]>::to_vec);
                let first = offsets.iter().find(|(o, _)| *o == offset).map(|(_, r)| r);
                if let (Ok(stack), Some(Record::Sample(first))) = (decoded, first) {
                    match &mut again.user {
                        Some(user) => user.stack = stack,
                        None => assert!(stack.is_empty()),
                    }
                    assert_eq!(&again, first, "sample_at({offset}) differs from the walk");
                }
            }
            Skimmed::Record(_) => {}
        }
        Ok(())
    });
    if let (Ok(full), Ok(skimmed)) = (full, skimmed) {
        let _ = full.problems();
        assert_eq!(full.truncated_bytes, skimmed.truncated_bytes);
        assert_eq!(full.corrupt_at, skimmed.corrupt_at);
    }
    reader.release_data_before(u64::MAX);
});

//! `metadata.txt` of a run folder or an archive from elsewhere: parsed by `postprocess`, written back by it. What
//! parses is written so that it parses again to the same.
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::report::metadata_txt::Metadata;

fuzz_target!(|data: &[u8]| {
    // postprocess reads it as UTF-8 text (anything else is refused before parsing).
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(meta) = Metadata::parse(text, "metadata.txt") else { return };
    let written = meta.to_string();
    let again = Metadata::parse(&written, "metadata.txt").unwrap_or_else(|e| panic!("{e:#} in\n{written}"));
    // The duration is written to the millisecond.
    let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() <= 0.0005 + a.abs() * 1e-12,
        (a, b) => a.is_none() && b.is_none(),
    };
    assert!(close(meta.duration_secs, again.duration_secs), "{:?} vs {:?}", meta.duration_secs, again.duration_secs);
    let (mut meta, mut again) = (meta, again);
    (meta.duration_secs, again.duration_secs) = (None, None);
    assert_eq!(meta, again, "written as\n{written}");
});

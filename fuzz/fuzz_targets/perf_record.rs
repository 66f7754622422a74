//! One perf.data record after another, decoded with the sample format of a fuzzed attr: the record and sample codec
//! (every record kind, samples with callchains, read values, raw data, user registers and stack copies, the user
//! callchain profcpu stashes after a copy's valid bytes). Input: `u8 attr length` (plus 64), the attr's bytes,
//! then records as they follow one another in a data section. A record that decodes encodes to one that decodes
//! to the same (for the formats the encoder writes).
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::perf_data::abi::{SAMPLE_BRANCH_STACK, SAMPLE_RAW, SAMPLE_READ};
use profcpu::perf_data::{Attr, Record};

fuzz_target!(|data: &[u8]| {
    let mut take = profcpu_fuzz::Take(data);
    let attr_len = 64 + take.u8() as usize;
    let Ok(attr) = Attr::from_bytes(take.bytes(attr_len).to_vec()) else { return };
    let format = attr.sample_format();
    let _ = (attr.event_name(), format.sample_id_size());
    // Formats whose every field the encoder writes back.
    let round_trips = format.sample_type & (SAMPLE_READ | SAMPLE_RAW | SAMPLE_BRANCH_STACK) == 0;
    let mut records = take.rest();
    while records.len() >= 8 {
        let size = (u16::from_ne_bytes([records[6], records[7]]) as usize).max(8).min(records.len());
        let (bytes, rest) = records.split_at(size);
        records = rest;
        let Ok(record) = Record::decode(bytes, &format) else { continue };
        let _ = record.time();
        let encoded = record.encode(&format);
        // A record too short to hold its sample_id trailer decodes without one (the encoder always writes it).
        let whole = bytes.len() >= 8 + format.sample_id_size();
        if round_trips && whole && encoded.len() <= u16::MAX as usize {
            let again = Record::decode(&encoded, &format).expect("an encoded record decodes");
            assert_eq!(again, record, "decode(encode(record)) differs");
        }
        let kind = u32::from_ne_bytes(bytes[..4].try_into().unwrap());
        if kind == profcpu::perf_data::abi::RECORD_SAMPLE {
            let _ = format.sample_time(&bytes[8..]);
        }
    }
});

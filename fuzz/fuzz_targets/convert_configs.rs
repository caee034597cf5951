//! A `config.json` through the converter's reader, for whichever family its `architectures`
//! names (every family's keys, defaults and range checks); a description or an error, never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = nornir_convert::fuzzing::parse_config(text);
    let _ = nornir_convert::fuzzing::parse_colbert_metadata(text);
});

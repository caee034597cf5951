//! A `config.json` through the converter's reader, for whichever family its `architectures`
//! names (every family's keys, defaults and range checks), and through `identify`, which names
//! its family by the same claims; a description, an error or no family, never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = nornir_convert::fuzzing::parse_config(text);
    let _ = nornir_convert::identify(text);
    let _ = nornir_convert::fuzzing::parse_colbert_metadata(text);
});

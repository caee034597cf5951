//! A `model.safetensors.index.json`: its weight map and the shard names it gives (never outside
//! the folder); files or an error, never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = nornir_convert::fuzzing::read_shard_index(text);
});

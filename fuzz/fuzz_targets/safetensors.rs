//! A `model.safetensors`: its header length, its JSON header and every tensor's bytes, as the
//! converter reads a file; tensors or an error, never a panic or an allocation sized by the header.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = nornir_convert::fuzzing::read_safetensors(data);
});

//! Any bytes as a `model.onnx` through the embedder's own protobuf reader (the scan for
//! operators that quantize activations per tensor, run on every model it opens): a list, never a
//! panic, and time linear in the file.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = nornir_embed::internals::per_tensor_activation_ops(data);
});

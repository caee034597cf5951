//! A `pytorch_model.bin` (a torch.save zip archive): its zip, its pickle on nornir's pickle
//! machine and every tensor's bytes; tensors or an error, never a panic, a hang or an allocation
//! the file's size does not pay for.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = nornir_convert::fuzzing::read_torch_archive(data);
});

//! A `data.pkl` alone on nornir's pickle machine (depth, memo, marks, dicts): a state dict or an
//! error, never a panic, a stack overflow or a quadratic walk.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = nornir_convert::fuzzing::read_pickle(data);
});

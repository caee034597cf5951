//! The ELF reader behind the provider preflight: any bytes give deps or an error, never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(deps) = nornir_gpu_probe::parse_deps(data) {
        // Every name it returns came out of the file.
        assert!(deps.needed.iter().all(|n| n.len() < data.len()));
    }
});

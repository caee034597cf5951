//! Proves the preload trick: a stub "provider" whose NEEDED names a stub runtime in a folder the
//! dynamic loader does not search fails to load, and loads once the probe has preloaded the
//! runtime from its candidate folder. Stands in for libonnxruntime_providers_cuda.so needing
//! libcublasLt.so.13 from a pip wheel's lib folder.

use nornir_test_support::stubs as support;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use nornir_gpu_probe::{RequirementStatus, preload_provider, provider_requirements};
use support::stub_library;

#[test]
fn provider_loads_only_after_its_runtime_is_preloaded() {
    let t = tempfile::tempdir().expect("tempdir");
    let runtime_dir = t.path().join("runtime");
    let provider_dir = t.path().join("provider");
    let runtime =
        stub_library(&runtime_dir, "libnornirstubrt.so.3", "int stub_runtime_value(void) { return 42; }\n", &[]);
    let provider = stub_library(
        &provider_dir,
        "libnornir_stub_provider.so",
        "int stub_runtime_value(void);\nint provider_value(void) { return stub_runtime_value() + 1; }\n",
        &[&runtime],
    );

    // SAFETY: test stubs with trivial initialisers.
    let before = unsafe { Library::open(Some(&provider), RTLD_NOW | RTLD_LOCAL) };
    let err = nornir_gpu_probe::describe_dl_error(
        &before.expect_err("the provider must not load while its runtime is out of the loader's reach"),
    );
    assert!(err.contains("libnornirstubrt.so.3"), "{err}");

    let unresolved = provider_requirements(&provider, &[]);
    let req = unresolved.requirements.iter().find(|r| r.soname == "libnornirstubrt.so.3").expect("NEEDED entry");
    assert_eq!(req.status, RequirementStatus::Missing);
    assert!(unresolved.summary().contains("libnornirstubrt.so.3 is missing"), "{}", unresolved.summary());

    let after = preload_provider(&provider, std::slice::from_ref(&runtime_dir));
    let req = after.requirements.iter().find(|r| r.soname == "libnornirstubrt.so.3").expect("NEEDED entry");
    assert_eq!(req.status, RequirementStatus::Loaded, "{after:?}");

    // SAFETY: as above; the symbol is `int provider_value(void)`.
    unsafe {
        let lib = Library::open(Some(&provider), RTLD_NOW | RTLD_LOCAL).expect("loads after the preload");
        let f = lib.get::<unsafe extern "C" fn() -> i32>("provider_value").expect("symbol");
        assert_eq!(f(), 43);
    }
}

#[test]
fn preflight_of_a_file_that_is_not_elf_is_an_error_not_a_panic() {
    let t = tempfile::tempdir().expect("tempdir");
    let bogus = t.path().join("libonnxruntime_providers_cuda.so");
    std::fs::write(&bogus, b"\x7fELF but truncated").expect("write");
    let r = provider_requirements(&bogus, &[]);
    assert!(r.error.as_deref().is_some_and(|e| e.contains("not a valid ELF")), "{r:?}");
    assert!(r.summary().contains("not a valid ELF"));
}

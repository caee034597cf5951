//! The library's side of plugin providers, with the real CPU plugin `nxrt-ep-cpu` that `cargo
//! xtask test` pip-installs into `NORNIR_TEST_EP_VENV`: named in the options, asked for by
//! name, reported with its library, and registered once however many embedders name it. Its own
//! process, since the first `Embedder` loads ONNX Runtime 1.31.1.

use std::path::PathBuf;

use nornir_embed::{Embedder, EmbedderOptions, list_devices};
use nornir_test_support::{cosine, env_path};

fn cpu_plugin() -> PathBuf {
    let lib = env_path("NORNIR_TEST_EP_VENV").join("lib");
    let py = std::fs::read_dir(&lib)
        .expect("venv lib")
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("python3"));
    py.expect("python3.x").path().join("site-packages/nxrt_ep_cpu/libonnx_runtime_ep_cpu_plugin.so")
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_named_plugin_runs_the_model_and_the_report_names_its_library() {
    nornir_test_support::needs_assets!();
    let model = env_path("NORNIR_TEST_PARAPHRASE_MODEL");
    let ort = env_path("NORNIR_TEST_ORT_CPU");
    let options = EmbedderOptions::default()
        .with_ort_library(&ort)
        .with_ep_library("mine", cpu_plugin())
        .with_providers(["cpu_ep"]);
    let plugin = Embedder::new(&model, &options).expect("an embedder on cpu_ep");
    let r = plugin.report();
    assert_eq!(r.active_provider, "cpu_ep", "{:?}", r.plan.reasons);
    let device = r.active_device.as_ref().expect("the plugin's device");
    assert_eq!(device.library.as_ref().map(|l| l.name.as_str()), Some("mine"));
    assert_eq!(plugin.gpu_vendor(), "cpu", "a CPU plugin runs on the CPU");
    assert!(r.devices.plugins.iter().any(|p| p.name == "mine" && p.error.is_none()), "{:?}", r.devices.plugins);
    // This test program is no probe program, and NORNIR_PLUGIN_PROBE is not set: registered
    // untried, and the report says so.
    let trial = r.devices.plugins.iter().find_map(|p| p.trial.clone()).unwrap_or_default();
    assert!(trial.starts_with("untried: no probe program"), "{trial}");
    // A second embedder naming it again: registered once, listed once.
    let cpu =
        Embedder::new(&model, &EmbedderOptions::default().with_ort_library(&ort).with_ep_library("mine", cpu_plugin()))
            .expect("an embedder on the CPU");
    assert_eq!(cpu.report().active_provider, "CPUExecutionProvider");
    let texts = ["a plugin provider", "the CPU provider", "the same vectors"];
    let (a, b) = (plugin.embed(&texts).expect("plugin"), cpu.embed(&texts).expect("cpu"));
    for i in 0..texts.len() {
        assert!(cosine(a.row(i), b.row(i)) >= 0.9999);
    }
    let rt = nornir_embed::internals::load_runtime(&r.plan, Some(&ort)).expect("the loaded runtime");
    let again = list_devices(&rt, &[("mine".to_owned(), cpu_plugin())]);
    assert_eq!(again.devices.iter().filter(|d| d.provider == "cpu_ep").count(), 1, "{:?}", again.devices);
}

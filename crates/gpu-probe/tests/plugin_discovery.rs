//! Finding plugin execution-provider libraries in a fake venv and `$NORNIR_HOME/ep`, with stub
//! libraries compiled here: a library that exports `CreateEpFactories` stands in for a vendor
//! plugin (the probe only reads its symbol table, never loads it), and ordinary libraries for
//! the rest of a `site-packages` folder.

use std::path::Path;

use nornir_gpu_probe::{PluginSource, ProbeContext, discover_plugins};
use nornir_test_support::stubs::stub_library;

const PLUGIN: &str = "void* CreateEpFactories(void) { return 0; }\nvoid ReleaseEpFactory(void) {}\n";
const PLAIN: &str = "int not_a_plugin(void) { return 1; }\n";
/// Imports `CreateEpFactories` without defining it: not a plugin either.
const IMPORTER: &str = "extern void* CreateEpFactories(void);\nvoid* call(void) { return CreateEpFactories(); }\n";

fn site_packages(venv: &Path) -> std::path::PathBuf {
    venv.join("lib/python3.12/site-packages")
}

#[test]
fn pip_packages_and_the_nornir_home_are_searched_and_only_plugins_are_kept() {
    let t = tempfile::tempdir().expect("tempdir");
    let venv = t.path().join("venv");
    let sp = site_packages(&venv);
    // A dedicated package with its runtime's libraries beside the plugin (as OpenVINO's is).
    let vendor = sp.join("onnxruntime_ep_vendor");
    stub_library(&vendor, "libruntime.so.7", PLAIN, &[]);
    let vendor_plugin = stub_library(&vendor, "libonnxruntime_providers_vendor_plugin.so", PLUGIN, &[]);
    // Any package with a plugin at its top (as nxrt_ep_cpu is).
    let other_plugin = stub_library(&sp.join("some_ep"), "libsome_ep.so", PLUGIN, &[]);
    // Packages that are not plugins: silent.
    stub_library(&sp.join("numpy_like"), "_core.cpython-312-x86_64-linux-gnu.so", PLAIN, &[]);
    stub_library(&sp.join("importer"), "libimporter.so", IMPORTER, &[]);
    // A dedicated package without a plugin: reported.
    stub_library(&sp.join("onnxruntime_ep_broken"), "libhelper.so", PLAIN, &[]);
    // onnxruntime itself is never a plugin source.
    stub_library(&sp.join("onnxruntime/capi"), "libonnxruntime.so.1.31.1", PLAIN, &[]);
    let home = t.path().join("home");
    let home_plugin = stub_library(&home.join("ep"), "libhome_ep.so", PLUGIN, &[]);
    stub_library(&home.join("ep"), "libnot_ep.so", PLAIN, &[]);

    let ctx = ProbeContext::with_root(t.path().join("root"))
        .with_var("VIRTUAL_ENV", &venv)
        .with_var("NORNIR_HOME", &home)
        .with_var("NORNIR_EP_LIBS", format!("again={}", other_plugin.display()));
    let d = discover_plugins(&ctx, &[]);
    let found: Vec<(&str, PluginSource, bool)> =
        d.libraries.iter().map(|l| (l.name.as_str(), l.source, l.usable())).collect();
    assert_eq!(
        found,
        [
            ("again", PluginSource::Explicit, true),
            ("onnxruntime_ep_broken", PluginSource::Python, false),
            ("onnxruntime_ep_vendor", PluginSource::Python, true),
            ("home_ep", PluginSource::NornirHome, true),
            ("not_ep", PluginSource::NornirHome, false),
        ],
        "{:#?}",
        d.libraries
    );
    // The same file named explicitly and found by pip is listed once, under the explicit name.
    assert_eq!(d.libraries[0].path, other_plugin);
    assert_eq!(d.libraries[2].path, vendor_plugin);
    assert_eq!(d.libraries[3].path, home_plugin);
    assert!(d.libraries[1].problem.as_deref().is_some_and(|p| p.contains("no library in this package exports")));
    assert!(d.libraries[4].problem.as_deref().is_some_and(|p| p.contains("does not export CreateEpFactories")));
    assert!(d.searched.contains(&sp));
    assert!(d.searched.contains(&home.join("ep")));
}

#[test]
fn a_bad_environment_entry_is_a_report_line() {
    let ctx = ProbeContext::with_root("/nonexistent").with_var("NORNIR_EP_LIBS", "name=, ,/no/such/libx.so");
    let d = discover_plugins(&ctx, &[]);
    let problems: Vec<&str> = d.libraries.iter().filter_map(|l| l.problem.as_deref()).collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].starts_with("NORNIR_EP_LIBS: plugin entry \"name=\" names no file"), "{problems:?}");
    assert_eq!(problems[1], "no such file");
}

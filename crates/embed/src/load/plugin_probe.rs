//! The probe program's side of a plugin's trial (see `plugin_trial.rs`): the same ONNX Runtime
//! library loaded, the plugin registered, and how far it got said on standard output.

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use ort::AsPointer;

use crate::load::plugin_trial::MARK;

/// The probe's side: loads the ONNX Runtime library `ort_library`, registers the plugin library
/// `plugin` under `name`, and returns the exit code: 0 registered, 1 ONNX Runtime refused it (its
/// message on standard error), 3 ONNX Runtime could not be loaded. A plugin that crashes or hangs
/// takes this process with it, which is what its caller watches for.
pub fn run_plugin_probe(ort_library: &Path, name: &str, plugin: &Path) -> u8 {
    let say = |word: &str| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{MARK} {word}");
        let _ = out.flush();
    };
    let env = crate::load::runtime::check_library(ort_library).map_err(|e| e.to_string()).and_then(|_| {
        let builder = ort::init_from(ort_library).map_err(|e| e.to_string())?;
        builder.with_name("nornir-plugin-probe").with_telemetry(false).build().map_err(|e| e.to_string())
    });
    let env = match env {
        Ok(env) => env,
        Err(e) => {
            eprintln!("cannot load ONNX Runtime from {}: {e}", ort_library.display());
            return 3;
        }
    };
    let (Ok(name), Ok(path)) = (CString::new(name), CString::new(plugin.as_os_str().as_bytes())) else {
        eprintln!("a plugin name or path with a NUL byte");
        return 1;
    };
    say("ready");
    // SAFETY: the environment is alive and the two strings outlive the call. Whatever the plugin
    // does here happens in this process only, which is the point of it.
    let st =
        unsafe { (ort::api().RegisterExecutionProviderLibrary)(env.ptr().cast_mut(), name.as_ptr(), path.as_ptr()) };
    // Never unloaded: the process ends next, and unloading ONNX Runtime is never safe.
    std::mem::forget(env);
    match crate::load::plugins::status(st) {
        Ok(()) => {
            say("registered");
            0
        }
        Err(e) => {
            eprintln!("{e}");
            say("refused");
            1
        }
    }
}

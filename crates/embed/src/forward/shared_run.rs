//! Runs a session from `&Session`, so that several workers run one CPU session at once and the
//! model's weights, and the kernels' pre-packed forms of them, exist once in memory.
//!
//! ONNX Runtime documents `Run` as callable from several threads on one session: its CPU kernels
//! keep no state between runs, and its allocator takes a lock. The `ort` crate's `run` takes
//! `&mut self` all the same, because some GPU providers have broken that promise. So only a
//! session on `CPUExecutionProvider` alone is run concurrently; the caller holds a GPU session
//! exclusively (`Engine::run_on` takes its write lock).
//!
//! It calls ONNX Runtime's C API directly for one thing, `OrtApi::Run`, exactly as `ort`'s own run
//! does, minus the `&mut` (plugins.rs is the other caller of the C API, for plugin providers and
//! the device list).

use std::ffi::{CString, c_char};
use std::ptr::{self, NonNull};

use ort::AsPointer;
use ort::memory::Allocator;
use ort::session::{Session, SessionInputValue};
use ort::value::DynValue;

/// Runs `session` on the named `inputs` and returns its output number `output`.
///
/// Safe for concurrent calls on one session when the session runs on the CPU provider alone;
/// for any other session the caller must hold it exclusively.
pub(crate) fn run(
    session: &Session,
    inputs: &[(String, SessionInputValue<'_>)],
    output: usize,
) -> ort::Result<DynValue> {
    let input_names = inputs.iter().map(|(n, _)| c_string(n)).collect::<ort::Result<Vec<CString>>>()?;
    let Some(outlet) = session.outputs().get(output) else {
        return Err(ort::Error::new(format!("the session has no output {output}")));
    };
    let output_name = c_string(outlet.name())?;
    let input_name_ptrs: Vec<*const c_char> = input_names.iter().map(|n| n.as_ptr()).collect();
    let output_name_ptrs = [output_name.as_ptr()];
    let input_ptrs: Vec<*const ort::sys::OrtValue> = inputs.iter().map(|(_, v)| v.ptr()).collect();
    let mut out: *mut ort::sys::OrtValue = ptr::null_mut();
    let _in_flight = crate::load::kernels::InFlight::start();
    // SAFETY: the session, the input values and the name strings outlive the call; the arrays
    // have the lengths given; ONNX Runtime writes one output pointer into `out`. Concurrent
    // calls on one session are ONNX Runtime's documented use (see the module's doc).
    let status = unsafe {
        (ort::api().Run)(
            session.ptr().cast_mut(),
            ptr::null(),
            input_name_ptrs.as_ptr(),
            input_ptrs.as_ptr(),
            input_ptrs.len(),
            output_name_ptrs.as_ptr(),
            output_name_ptrs.len(),
            &raw mut out,
        )
    };
    // SAFETY: `status` is what `Run` returned: null, or a status this call owns and frees.
    unsafe { ort::Error::result_from_status(status) }?;
    let Some(out) = NonNull::new(out) else {
        return Err(ort::Error::new("ONNX Runtime returned no output value"));
    };
    // SAFETY: `out` is a value `Run` created for this caller, who owns it from here: the
    // returned value releases it when dropped. Its buffer comes from the session's CPU
    // allocator; the default CPU allocator stands for it (`ort` asks one of every tensor).
    Ok(unsafe { DynValue::from_ptr(out, Some(&Allocator::default())) })
}

/// `name` as C wants it; an error for a name with a NUL byte.
fn c_string(name: &str) -> ort::Result<CString> {
    CString::new(name).map_err(|_| ort::Error::new(format!("a name with a NUL byte: {name:?}")))
}

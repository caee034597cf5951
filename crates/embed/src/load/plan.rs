//! The plan for this machine: the probe's verdicts and the user's preference through the policy.

use nornir_ep_select::{Compiled, Device, EpDevice, Inputs, Plan, VendorState, plan};
use nornir_gpu_probe::{VendorReport, probe};

/// The probe's verdict, as the policy needs it.
fn vendor_state(r: &VendorReport) -> VendorState {
    VendorState { available: r.available, summary: r.summary.clone() }
}

/// The plan this process would use for this device (probe + policy, no ONNX Runtime).
pub fn plan_for(device: Device) -> Plan {
    plan_with(device, None, &[], &[])
}

/// The plan for a model that may run well only on the CPU (`model_cpu_only`: why, as
/// [`Quantization::cpu_only`](crate::Quantization::cpu_only) says), with ONNX Runtime's device list (see [`list_devices`](crate::list_devices)), whose
/// plugin devices join it, and the providers the user named (`--providers`; empty for none).
pub fn plan_with(device: Device, model_cpu_only: Option<String>, devices: &[EpDevice], providers: &[String]) -> Plan {
    let p = probe();
    plan(&Inputs {
        compiled: Compiled::new(cfg!(feature = "cuda"), cfg!(feature = "rocm")),
        cuda: vendor_state(&p.cuda),
        rocm: vendor_state(&p.rocm),
        device,
        model_cpu_only,
        devices: devices.to_vec(),
        providers: providers.to_vec(),
    })
}

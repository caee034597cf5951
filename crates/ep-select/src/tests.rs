//! Every combination of compiled features x probe results x device, checked against an
//! independent statement of the rules plus invariants that must hold for all of them.

use super::*;

const DEVICES: [Device; 4] = [Device::Auto, Device::Cpu, Device::Cuda, Device::Rocm];

/// (vendor, refused) the rules demand, written as a table independent of `plan`'s code.
fn expected(cuda_c: bool, rocm_c: bool, cuda_a: bool, rocm_a: bool, device: Device) -> (Vendor, bool) {
    match device {
        Device::Cpu => (Vendor::Cpu, false),
        Device::Cuda => (Vendor::Cuda, !cuda_c),
        Device::Rocm => (Vendor::Amd, !rocm_c),
        Device::Auto if rocm_c && rocm_a => (Vendor::Amd, false),
        Device::Auto if cuda_c && cuda_a => (Vendor::Cuda, false),
        Device::Auto => (Vendor::Cpu, false),
    }
}

#[test]
fn every_combination() {
    let mut cases = 0;
    for cuda_c in [false, true] {
        for rocm_requested in [false, true] {
            let compiled = Compiled::new(cuda_c, rocm_requested);
            let rocm_c = compiled.rocm();
            assert_eq!(rocm_c, rocm_requested && cfg!(feature = "rocm"));
            for cuda_a in [false, true] {
                for rocm_a in [false, true] {
                    for device in DEVICES {
                        let inputs = Inputs {
                            compiled,
                            cuda: VendorState { available: cuda_a, summary: "cuda probe says".into() },
                            rocm: VendorState { available: rocm_a, summary: "rocm probe says".into() },
                            device,
                            model_cpu_only: None,
                            devices: Vec::new(),
                            providers: Vec::new(),
                        };
                        let p = plan(&inputs);
                        let case = format!("{cuda_c} {rocm_c} {cuda_a} {rocm_a} {device}: {p:?}");
                        let (vendor, refused) = expected(cuda_c, rocm_c, cuda_a, rocm_a, device);
                        assert_eq!(p.vendor, vendor, "{case}");
                        assert_eq!(p.refusal.is_some(), refused, "{case}");
                        assert!(!p.reasons.is_empty(), "{case}");
                        assert_eq!(p.forced, matches!(device, Device::Cuda | Device::Rocm), "{case}");
                        if refused {
                            assert!(p.providers.is_empty(), "{case}");
                        } else {
                            assert!(
                                p.providers.last().is_some_and(Planned::is_builtin_cpu),
                                "CPU ends every plan: {case}"
                            );
                            assert!(
                                p.providers[..p.providers.len() - 1].iter().all(|x| x.vendor() == vendor),
                                "{case}"
                            );
                            assert_eq!(p.providers.len() == 1, vendor == Vendor::Cpu, "{case}");
                        }
                        if device == Device::Auto && vendor == Vendor::Cpu {
                            assert!(
                                p.reasons.iter().any(|r| r.contains("cuda probe says") || r.contains("not compiled")),
                                "{case}"
                            );
                        }
                        cases += 1;
                    }
                }
            }
        }
    }
    assert_eq!(cases, 2 * 2 * 2 * 2 * 4);
}

#[test]
fn amd_first_when_both_present() {
    let inputs = Inputs {
        compiled: Compiled::new(true, true),
        cuda: VendorState { available: true, summary: "CUDA: available: 1 device(s)".into() },
        rocm: VendorState { available: true, summary: "ROCm: available: 1 device(s)".into() },
        device: Device::Auto,
        model_cpu_only: None,
        devices: Vec::new(),
        providers: Vec::new(),
    };
    let p = plan(&inputs);
    if cfg!(feature = "rocm") {
        assert_eq!(p.vendor, Vendor::Amd);
        let names: Vec<&str> = p.providers.iter().map(|p| p.ort_name()).collect();
        assert_eq!(names, ["MIGraphXExecutionProvider", "ROCMExecutionProvider", "CPUExecutionProvider"]);
        assert!(p.reasons.iter().any(|r| r.starts_with("CUDA: skipped")), "{:?}", p.reasons);
    } else {
        assert_eq!(p.vendor, Vendor::Cuda);
        assert!(p.reasons[0].contains("not compiled"), "{:?}", p.reasons);
    }
}

/// An int8 model for the CPU on a machine with a GPU: auto runs it on the CPU and says why; a
/// forced GPU is refused, never a GPU session that hands every int8 node back to the CPU.
#[test]
fn a_cpu_only_model_runs_on_the_cpu_and_a_forced_gpu_is_refused() {
    let inputs = |device| Inputs {
        compiled: Compiled::new(true, true),
        cuda: VendorState { available: true, summary: "CUDA: available: 1 device(s)".into() },
        rocm: VendorState { available: true, summary: "ROCm: available: 1 device(s)".into() },
        device,
        model_cpu_only: Some("the model is int8 for the CPU".into()),
        devices: Vec::new(),
        providers: Vec::new(),
    };
    let p = plan(&inputs(Device::Auto));
    assert_eq!(p.vendor, Vendor::Cpu);
    assert_eq!(p.providers, [Planned::Builtin(Provider::Cpu)]);
    assert!(p.reasons.iter().any(|r| r.contains("skipped because the model is int8 for the CPU")), "{:?}", p.reasons);
    for device in [Device::Cuda, Device::Rocm] {
        let p = plan(&inputs(device));
        let why = p.refusal.unwrap_or_default();
        assert!(why.contains("int8 for the CPU") && why.contains("--device cpu"), "{why}");
    }
    let p = plan(&inputs(Device::Cpu));
    assert_eq!((p.vendor, p.refusal), (Vendor::Cpu, None));
}

#[test]
fn device_parsing() {
    assert_eq!("AUTO".parse::<Device>(), Ok(Device::Auto));
    assert_eq!("".parse::<Device>(), Ok(Device::Auto));
    assert_eq!(" cuda ".parse::<Device>(), Ok(Device::Cuda));
    assert_eq!("amd".parse::<Device>(), Ok(Device::Rocm));
    assert!("tpu".parse::<Device>().expect_err("unknown device").contains("auto, cpu, cuda or rocm"));
}

#[test]
fn provider_names_round_trip() {
    for p in Provider::ALL {
        assert_eq!(Provider::from_ort_name(p.ort_name()), Some(*p));
    }
    assert_eq!(Provider::from_ort_name("TensorrtExecutionProvider"), None);
}

fn device(provider: &str, hardware: Hardware, pci: u32, index: usize) -> EpDevice {
    EpDevice {
        provider: provider.to_owned(),
        provider_vendor: "maker".to_owned(),
        hardware,
        pci_vendor_id: pci,
        device_id: 0x74a1,
        hardware_vendor: "vendor".to_owned(),
        library: Some(PluginRef { name: provider.to_lowercase(), path: format!("/ep/lib{provider}.so") }),
        index,
    }
}

fn with_devices(cuda: bool, rocm: bool, devices: Vec<EpDevice>) -> Inputs {
    Inputs {
        compiled: Compiled::new(true, true),
        cuda: VendorState { available: cuda, summary: "cuda probe says".into() },
        rocm: VendorState { available: rocm, summary: "rocm probe says".into() },
        device: Device::Auto,
        model_cpu_only: None,
        devices,
        providers: Vec::new(),
    }
}

fn names(p: &Plan) -> Vec<&str> {
    p.providers.iter().map(Planned::ort_name).collect()
}

/// A plugin GPU counts for its PCI vendor: an AMD one comes before CUDA only in a build with the
/// AMD path; NVIDIA's plugins follow the built-in CUDA provider.
#[test]
fn plugin_gpus_join_their_vendor_in_the_seed_order() {
    let amd = device("MIGraphXPluginEP", Hardware::Gpu, PCI_AMD, 1);
    let rtx = device("NvTensorRTRTXExecutionProvider", Hardware::Gpu, PCI_NVIDIA, 2);
    let p = plan(&with_devices(true, false, vec![amd.clone(), rtx.clone()]));
    if cfg!(feature = "rocm") {
        assert_eq!(p.vendor, Vendor::Amd);
        assert_eq!(names(&p), ["MIGraphXPluginEP", "CPUExecutionProvider"], "{:?}", p.reasons);
        assert!(p.reasons.iter().any(|r| r.contains("CUDA: skipped because an AMD GPU")), "{:?}", p.reasons);
    } else {
        assert_eq!(p.vendor, Vendor::Cuda);
        assert_eq!(
            names(&p),
            ["CUDAExecutionProvider", "NvTensorRTRTXExecutionProvider", "CPUExecutionProvider"],
            "{:?}",
            p.reasons
        );
        assert!(
            p.reasons.iter().any(|r| r.contains("MIGraphXPluginEP") && r.contains("not compiled")),
            "{:?}",
            p.reasons
        );
    }
    // No CUDA runtime for the built-in provider, but ONNX Runtime lists an NVIDIA plugin device.
    let p = plan(&with_devices(false, false, vec![rtx.clone()]));
    assert_eq!(names(&p), ["NvTensorRTRTXExecutionProvider", "CPUExecutionProvider"], "{:?}", p.reasons);
    assert!(p.reasons.iter().any(|r| r.contains("built-in provider skipped (cuda probe says)")), "{:?}", p.reasons);
    // Forced to cuda: the built-in, then the plugin.
    let mut forced = with_devices(true, false, vec![rtx]);
    forced.device = Device::Cuda;
    let p = plan(&forced);
    assert!(p.forced);
    assert_eq!(names(&p), ["CUDAExecutionProvider", "NvTensorRTRTXExecutionProvider", "CPUExecutionProvider"]);
}

/// A CPU-type plugin, or another vendor's GPU, is never chosen automatically: a reason says how.
#[test]
fn other_plugins_wait_to_be_named() {
    let cpu_ep = device("cpu_ep", Hardware::Cpu, 0x1022, 1);
    let intel = device("OpenVINOExecutionProvider", Hardware::Gpu, 0x8086, 2);
    let p = plan(&with_devices(false, false, vec![cpu_ep, intel]));
    assert_eq!(names(&p), ["CPUExecutionProvider"]);
    assert!(p.reasons.iter().any(|r| r.contains("--providers OpenVINOExecutionProvider")), "{:?}", p.reasons);
    assert!(p.reasons.iter().any(|r| r.contains("--providers cpu_ep")), "{:?}", p.reasons);
}

#[test]
fn named_providers_in_order_then_the_cpu() {
    let cpu_ep = device("cpu_ep", Hardware::Cpu, 0x1022, 1);
    let amd = device("AmdGpuEP", Hardware::Gpu, PCI_AMD, 2);
    let mut inputs = with_devices(false, false, vec![cpu_ep, amd]);
    inputs.providers = vec!["cpu_ep".into(), "cuda".into(), "missing_ep".into(), "AmdGpuEP".into()];
    inputs.device = Device::Rocm;
    let p = plan(&inputs);
    assert!(!p.forced && p.refusal.is_none());
    assert_eq!(p.vendor, Vendor::Cpu, "the first named provider runs on the CPU");
    let expected: &[&str] = if cfg!(feature = "rocm") {
        &["cpu_ep", "CUDAExecutionProvider", "AmdGpuEP", "CPUExecutionProvider"]
    } else {
        &["cpu_ep", "CUDAExecutionProvider", "CPUExecutionProvider"]
    };
    assert_eq!(names(&p), expected, "{:?}", p.reasons);
    assert!(
        p.reasons.iter().any(|r| r.starts_with("missing_ep: skipped: ONNX Runtime lists no device")),
        "{:?}",
        p.reasons
    );
    assert!(p.reasons.iter().any(|r| r.contains("device rocm: ignored")), "{:?}", p.reasons);
    // A model for the CPU only keeps the CPU plugin and drops the GPU entries.
    inputs.model_cpu_only = Some("the model is int8 for the CPU".into());
    let p = plan(&inputs);
    assert_eq!(names(&p), ["cpu_ep", "CPUExecutionProvider"], "{:?}", p.reasons);
}

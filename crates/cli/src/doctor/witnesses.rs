//! Two witnesses of the GPUs: the probe (drivers, libraries) and ONNX Runtime's device list.

use nornir_vector::diagnostics::{EpDevice, Hardware, PCI_AMD, PCI_NVIDIA, ProbeReport};

/// The probe and ONNX Runtime's device list on the GPUs: what each saw, and where they disagree.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Witnesses {
    /// GPU vendors whose driver the probe found (`cuda`, `rocm`).
    pub probe: Vec<String>,
    /// GPU vendors ONNX Runtime lists a device of (by PCI vendor id), with the providers.
    pub onnx_runtime: Vec<String>,
    /// Whether ONNX Runtime was loaded and asked at all.
    pub listed: bool,
    /// One line per disagreement.
    pub disagreements: Vec<String>,
}

pub(super) fn witnesses(probe: &ProbeReport, devices: &[EpDevice], listed: bool) -> Witnesses {
    let mut w = Witnesses { listed, ..Witnesses::default() };
    for (vendor, name, pci, found) in
        [("rocm", "AMD", PCI_AMD, probe.rocm.driver_present), ("cuda", "NVIDIA", PCI_NVIDIA, probe.cuda.driver_present)]
    {
        let gpus: Vec<&EpDevice> =
            devices.iter().filter(|d| d.hardware == Hardware::Gpu && d.pci_vendor_id == pci).collect();
        if found {
            w.probe.push(vendor.to_owned());
        }
        if !gpus.is_empty() {
            let providers: Vec<&str> = gpus.iter().map(|d| d.provider.as_str()).collect();
            w.onnx_runtime.push(format!("{vendor} ({})", providers.join(", ")));
        }
        if !listed {
            continue;
        }
        let summary = if vendor == "rocm" { &probe.rocm.summary } else { &probe.cuda.summary };
        match (found, gpus.is_empty()) {
            (true, true) => w.disagreements.push(format!(
                "the probe found an {name} GPU ({summary}) but ONNX Runtime lists no {name} GPU device: its built-in providers are not listed, and no plugin provider for this GPU is registered"
            )),
            (false, false) => w.disagreements.push(format!(
                "ONNX Runtime lists an {name} GPU ({}) but the probe found no {name} driver ({summary})",
                gpus.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("; ")
            )),
            _ => {}
        }
    }
    w
}

pub(super) fn witnesses_line(w: &Witnesses) -> String {
    if !w.listed {
        return "ONNX Runtime was not loaded, so only the probe speaks".to_owned();
    }
    if !w.disagreements.is_empty() {
        return format!("disagree: {}", w.disagreements.join("; "));
    }
    if w.probe.is_empty() {
        "agree: no AMD or NVIDIA GPU (neither the probe nor ONNX Runtime's device list has one)".to_owned()
    } else {
        format!("agree: the probe found {} and ONNX Runtime lists {}", w.probe.join(", "), w.onnx_runtime.join(", "))
    }
}

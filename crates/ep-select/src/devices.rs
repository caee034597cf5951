//! ONNX Runtime's own device list (`GetEpDevices`) as plain values, and the plan's entries: a
//! provider built into ONNX Runtime, or a plugin provider on one listed device.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Provider, Vendor};

/// PCI vendor ids ONNX Runtime reports for a device.
pub const PCI_AMD: u32 = 0x1002;
pub const PCI_NVIDIA: u32 = 0x10de;

/// The kind of hardware a listed device is (`OrtHardwareDeviceType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hardware {
    Cpu,
    Gpu,
    Npu,
}

impl Hardware {
    pub fn label(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Gpu => "gpu",
            Self::Npu => "npu",
        }
    }
}

/// One (execution provider, hardware device) pair ONNX Runtime lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpDevice {
    /// The provider's ONNX Runtime name (`cpu_ep`, `OpenVINOExecutionProvider`).
    pub provider: String,
    /// Who made the provider, as it says.
    pub provider_vendor: String,
    pub hardware: Hardware,
    /// The hardware's PCI vendor id (0x1002 AMD, 0x10de NVIDIA, 0x8086 Intel).
    pub pci_vendor_id: u32,
    pub device_id: u32,
    /// The hardware vendor's name as ONNX Runtime gives it.
    pub hardware_vendor: String,
    /// The plugin library's registration name and path; `None` for a provider built into ONNX
    /// Runtime (its CPU provider is always listed).
    pub library: Option<PluginRef>,
    /// Its position in ONNX Runtime's list, which the embedder hands back to ONNX Runtime.
    pub index: usize,
}

/// The plugin library a device came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginRef {
    pub name: String,
    pub path: String,
}

impl EpDevice {
    /// The GPU vendor this device counts for in the design's order (docs/design.md): a GPU with AMD's or NVIDIA's
    /// PCI id; `None` for anything else (a CPU, an NPU, another vendor's GPU).
    pub fn gpu_vendor(&self) -> Option<Vendor> {
        match (self.hardware, self.pci_vendor_id) {
            (Hardware::Gpu, PCI_AMD) => Some(Vendor::Amd),
            (Hardware::Gpu, PCI_NVIDIA) => Some(Vendor::Cuda),
            _ => None,
        }
    }

    /// Where the model runs on it: its GPU vendor, the CPU, or another accelerator.
    pub fn vendor(&self) -> Vendor {
        match self.hardware {
            Hardware::Cpu => Vendor::Cpu,
            _ => self.gpu_vendor().unwrap_or(Vendor::Other),
        }
    }

    pub fn is_plugin(&self) -> bool {
        self.library.is_some()
    }
}

impl fmt::Display for EpDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on {} {} (vendor 0x{:04x}, device 0x{:04x})",
            self.provider,
            self.hardware_vendor,
            self.hardware.label().to_ascii_uppercase(),
            self.pci_vendor_id,
            self.device_id
        )?;
        if let Some(lib) = &self.library {
            write!(f, " from plugin {} ({})", lib.name, lib.path)?;
        }
        Ok(())
    }
}

/// One entry of a plan, in registration order. In JSON a built-in provider is its name as
/// before plugins (`"Cuda"`), a plugin its device object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Planned {
    /// A provider compiled into ONNX Runtime, registered by name.
    Builtin(Provider),
    /// A plugin provider on one device ONNX Runtime listed.
    Plugin(EpDevice),
}

impl Planned {
    /// The provider's ONNX Runtime name.
    pub fn ort_name(&self) -> &str {
        match self {
            Self::Builtin(p) => p.ort_name(),
            Self::Plugin(d) => &d.provider,
        }
    }

    pub fn vendor(&self) -> Vendor {
        match self {
            Self::Builtin(p) => p.vendor(),
            Self::Plugin(d) => d.vendor(),
        }
    }

    /// The built-in provider, if it is one.
    pub fn builtin(&self) -> Option<Provider> {
        match self {
            Self::Builtin(p) => Some(*p),
            Self::Plugin(_) => None,
        }
    }

    /// ONNX Runtime's own CPU provider, which every plan ends with.
    pub fn is_builtin_cpu(&self) -> bool {
        *self == Self::Builtin(Provider::Cpu)
    }
}

impl fmt::Display for Planned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.ort_name())
    }
}

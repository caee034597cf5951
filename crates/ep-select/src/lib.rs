//! Pure policy: turns what this build contains, what the probe found, what ONNX Runtime lists
//! (its devices, plugin providers among them) and what the user asked for into an ordered
//! execution-provider plan, with a reason line for every choice and every skip.
//!
//! It does no I/O, cannot fail, and knows nothing of ONNX Runtime or of how libraries are found:
//! its inputs are plain values, so every combination is tested as a table.

#![forbid(unsafe_code)]

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

mod devices;

pub use devices::{EpDevice, Hardware, PCI_AMD, PCI_NVIDIA, Planned, PluginRef};

/// The device the user asks for (`NORNIR_DEVICE`, `--device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Device {
    /// The best available, ending at CPU.
    #[default]
    Auto,
    Cpu,
    Cuda,
    Rocm,
}

impl FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "cuda" | "nvidia" => Ok(Self::Cuda),
            "rocm" | "amd" => Ok(Self::Rocm),
            other => Err(format!("unknown device {other:?}: use auto, cpu, cuda or rocm")),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
            Self::Rocm => "rocm",
        })
    }
}

/// Where the model runs: the plan's intended vendor, or what really ran. Written (JSON,
/// [`label`](Self::label)) as `"cpu"`, `"cuda"`, `"rocm"` and `"other"`: an AMD GPU is `"rocm"`,
/// as the design's `gpu_vendor()` has always named it, whichever AMD provider runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Vendor {
    Cpu,
    /// An NVIDIA GPU (the CUDA provider).
    Cuda,
    /// An AMD GPU (the MIGraphX or the ROCm provider).
    #[serde(rename = "rocm")]
    Amd,
    /// A GPU or NPU of another vendor, through a plugin provider the user named.
    Other,
}

impl Vendor {
    /// `"cpu"`, `"cuda"`, `"rocm"` (AMD) or `"other"`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
            Self::Amd => "rocm",
            Self::Other => "other",
        }
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// An ONNX Runtime execution provider the plan can request. Every variant exists in every build,
/// as wgpu's backends do: a build without the `rocm` feature never plans the AMD ones
/// ([`Compiled`]), and the embedder refuses to register them. It is exhaustive, so a match needs
/// no catch-all arm (a new provider is a breaking change, which it is for the code behind it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Provider {
    Cuda,
    MiGraphX,
    Rocm,
    Cpu,
}

impl Provider {
    /// The name ONNX Runtime uses (`CUDAExecutionProvider`).
    pub fn ort_name(self) -> &'static str {
        match self {
            Self::Cuda => "CUDAExecutionProvider",
            Self::MiGraphX => "MIGraphXExecutionProvider",
            Self::Rocm => "ROCMExecutionProvider",
            Self::Cpu => "CPUExecutionProvider",
        }
    }

    /// The `<name>` of `libonnxruntime_providers_<name>.so`; `None` for CPU, which is built in.
    pub fn library_name(self) -> Option<&'static str> {
        match self {
            Self::Cuda => Some("cuda"),
            Self::MiGraphX => Some("migraphx"),
            Self::Rocm => Some("rocm"),
            Self::Cpu => None,
        }
    }

    pub fn vendor(self) -> Vendor {
        match self {
            Self::Cuda => Vendor::Cuda,
            Self::MiGraphX | Self::Rocm => Vendor::Amd,
            Self::Cpu => Vendor::Cpu,
        }
    }

    /// The provider with this ONNX Runtime name.
    pub fn from_ort_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|p| p.ort_name() == name)
    }

    /// Every provider nornir knows, in every build.
    pub const ALL: &'static [Provider] = &[Self::Cuda, Self::MiGraphX, Self::Rocm, Self::Cpu];
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.ort_name())
    }
}

/// Which GPU paths this build contains. AMD is true only in a build with the `rocm` feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compiled {
    cuda: bool,
    rocm: bool,
}

impl Compiled {
    /// `rocm` is ignored (false) in a build without the `rocm` feature.
    pub fn new(cuda: bool, rocm: bool) -> Self {
        Self { cuda, rocm: rocm && cfg!(feature = "rocm") }
    }
    pub fn cuda(self) -> bool {
        self.cuda
    }
    pub fn rocm(self) -> bool {
        self.rocm
    }
}

/// The probe's verdict on one vendor, reduced to what the policy needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VendorState {
    pub available: bool,
    /// The probe's one-line summary, quoted in the plan's reasons.
    pub summary: String,
}

#[derive(Debug, Clone)]
pub struct Inputs {
    pub compiled: Compiled,
    pub cuda: VendorState,
    pub rocm: VendorState,
    /// What the user asked for: the CPU, a GPU vendor, or auto (docs/design.md's
    /// `prefer_gpu = false` is `Device::Cpu`).
    pub device: Device,
    /// Set when the model itself can run well only on the CPU (an int8 model for the CPU): why.
    pub model_cpu_only: Option<String>,
    /// ONNX Runtime's device list once it is loaded and the plugins are registered (empty
    /// before): plugin devices join the plan by their vendor.
    pub devices: Vec<EpDevice>,
    /// Provider names the user asked for (`--providers`), tried in this order, then the CPU;
    /// empty for the automatic or `device` plan.
    pub providers: Vec<String>,
}

/// The ordered providers to register, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Plan {
    /// The vendor the plan aims at.
    pub vendor: Vendor,
    /// In registration order; ONNX Runtime's CPU provider always last. Empty when `refusal` is set.
    pub providers: Vec<Planned>,
    /// One line per choice and per skip.
    pub reasons: Vec<String>,
    /// The user forced this vendor: running anywhere else is an error, never a substitute.
    pub forced: bool,
    /// Set when the user forced a device this build cannot offer; the embedder must refuse.
    pub refusal: Option<String>,
}

const AMD_NOT_COMPILED: &str = "AMD GPU support is not compiled into this build (add --features embed-ort-rocm)";

/// Makes the plan. Rules (docs/design.md's, plus forcing, plugins and an explicit list):
/// - `providers` named -> those, in that order, then CPU (see [`explicit_plan`]);
/// - device forced to cpu -> `[CPU]`;
/// - device forced to a GPU -> that vendor's providers, then CPU, `forced`; refused if not compiled;
/// - auto: AMD compiled and available -> `[MIGraphX, ROCm, AMD plugin GPUs, CPU]`; else CUDA
///   compiled and available -> `[CUDA, NVIDIA plugin GPUs, CPU]`; else `[CPU]`. AMD wins when both
///   vendors are present. A vendor is available when the probe found its runtime (for the
///   built-in providers) or ONNX Runtime lists a plugin GPU device of its PCI vendor (for those).
/// - a model that runs well only on the CPU: forced to a GPU -> refused; auto -> `[CPU]`, with why.
pub fn plan(inputs: &Inputs) -> Plan {
    if !inputs.providers.is_empty() {
        return explicit_plan(inputs);
    }
    let Inputs { compiled, cuda, rocm, device, model_cpu_only, devices, .. } = inputs;
    let amd_plugins = plugin_gpus(devices, Vendor::Amd);
    let nvidia_plugins = plugin_gpus(devices, Vendor::Cuda);
    let amd_ready = compiled.rocm() && (rocm.available || !amd_plugins.is_empty());
    let nvidia_ready = compiled.cuda() && (cuda.available || !nvidia_plugins.is_empty());
    let mut reasons = Vec::new();
    if let Some(why) = model_cpu_only {
        match device {
            Device::Cuda | Device::Rocm => {
                let vendor = if *device == Device::Cuda { Vendor::Cuda } else { Vendor::Amd };
                return refused(
                    vendor,
                    &format!("{why}: run it with --device cpu (or auto), or run the float32 model on the GPU"),
                );
            }
            Device::Auto if amd_ready || nvidia_ready => {
                reasons.push(format!("GPU: skipped because {why}"));
                reasons.push("CPU: chosen for this model".to_owned());
                return cpu_plan(reasons);
            }
            _ => {}
        }
    }
    match device {
        Device::Cpu => {
            reasons.push("CPU: chosen because the device is forced to cpu".to_owned());
            cpu_plan(reasons)
        }
        Device::Cuda => {
            if !compiled.cuda() {
                return refused(
                    Vendor::Cuda,
                    "CUDA support is not compiled into this build (add --features embed-ort)",
                );
            }
            reasons.push(format!("CUDA: requested because the device is forced to cuda (probe: {})", cuda.summary));
            let mut providers = vec![Planned::Builtin(Provider::Cuda)];
            add_plugins(&mut providers, &mut reasons, nvidia_plugins);
            gpu_plan(Vendor::Cuda, providers, reasons, true)
        }
        Device::Rocm => forced_amd(*compiled, rocm, amd_plugins, reasons),
        Device::Auto => {
            if compiled.rocm() {
                if amd_ready {
                    if rocm.available {
                        reasons.push(format!("ROCm: requested ({})", rocm.summary));
                    } else {
                        reasons.push(format!("ROCm: built-in providers skipped ({})", rocm.summary));
                    }
                    if nvidia_ready {
                        reasons.push("CUDA: skipped because an AMD GPU is available and comes first".to_owned());
                    }
                    return auto_amd(rocm.available, amd_plugins, reasons);
                }
                reasons.push(format!("ROCm: skipped ({})", rocm.summary));
            } else {
                reasons.push(format!("AMD: skipped: {AMD_NOT_COMPILED}"));
                for d in &amd_plugins {
                    reasons.push(format!("{d}: skipped: {AMD_NOT_COMPILED}"));
                }
            }
            if !compiled.cuda() {
                reasons.push("CUDA: skipped: not compiled into this build".to_owned());
            } else if nvidia_ready {
                let mut providers = Vec::new();
                if cuda.available {
                    reasons.push(format!("CUDA: requested ({})", cuda.summary));
                    providers.push(Planned::Builtin(Provider::Cuda));
                } else {
                    reasons.push(format!("CUDA: built-in provider skipped ({})", cuda.summary));
                }
                add_plugins(&mut providers, &mut reasons, nvidia_plugins);
                return gpu_plan(Vendor::Cuda, providers, reasons, false);
            } else {
                reasons.push(format!("CUDA: skipped ({})", cuda.summary));
            }
            for d in devices.iter().filter(|d| d.is_plugin() && d.gpu_vendor().is_none()) {
                reasons.push(format!("{d}: not chosen automatically; ask for it with --providers {}", d.provider));
            }
            reasons.push("CPU: chosen because no GPU is available".to_owned());
            cpu_plan(reasons)
        }
    }
}

/// `--providers`: each name in order, a built-in provider or every device ONNX Runtime lists for
/// a plugin of that name, then CPU. Not forced: a name that is missing or fails is a reason
/// line, and the CPU answers. A model for the CPU only skips the GPU and NPU entries.
pub fn explicit_plan(inputs: &Inputs) -> Plan {
    let Inputs { compiled, device, model_cpu_only, devices, providers: names, .. } = inputs;
    let mut reasons = vec![format!("providers asked for: {}, in that order, then the CPU", names.join(", "))];
    if *device != Device::Auto {
        reasons.push(format!("device {device}: ignored, because the providers are named"));
    }
    let mut providers = Vec::new();
    let mut wanted = |entry: Planned, reasons: &mut Vec<String>| {
        let vendor = entry.vendor();
        if let Some(why) = model_cpu_only.as_ref().filter(|_| vendor != Vendor::Cpu) {
            reasons.push(format!("{entry}: skipped because {why}"));
        } else if vendor == Vendor::Amd && !compiled.rocm() {
            reasons.push(format!("{entry}: skipped: {AMD_NOT_COMPILED}"));
        } else if !providers.contains(&entry) {
            providers.push(entry);
        }
    };
    for name in names {
        let name = name.trim();
        if let Some(p) = builtin_named(name) {
            if p == Provider::Cpu {
                reasons.push("CPUExecutionProvider: always registered last".to_owned());
                continue;
            }
            reasons.push(format!("{}: requested", p.ort_name()));
            wanted(Planned::Builtin(p), &mut reasons);
            continue;
        }
        let listed: Vec<&EpDevice> = devices.iter().filter(|d| d.provider.eq_ignore_ascii_case(name)).collect();
        if listed.is_empty() {
            let known: Vec<&str> = devices.iter().map(|d| d.provider.as_str()).collect();
            reasons.push(format!(
                "{name}: skipped: ONNX Runtime lists no device for it (listed: {}); install its plugin next to nornir or give --ep-lib NAME=PATH",
                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
            ));
        }
        for d in listed {
            reasons.push(format!("{d}: requested"));
            wanted(Planned::Plugin(d.clone()), &mut reasons);
        }
    }
    let vendor = providers.first().map_or(Vendor::Cpu, Planned::vendor);
    providers.push(Planned::Builtin(Provider::Cpu));
    reasons.push("CPU: registered last; it takes over if the providers before it fail".to_owned());
    Plan { vendor, providers, reasons, forced: false, refusal: None }
}

/// A built-in provider by its ONNX Runtime name or its short name (`cuda`, `migraphx`, `cpu`).
fn builtin_named(name: &str) -> Option<Provider> {
    Provider::ALL.iter().copied().find(|p| {
        p.ort_name().eq_ignore_ascii_case(name) || p.library_name().unwrap_or("cpu").eq_ignore_ascii_case(name)
    })
}

/// The plugin GPU devices that count for `vendor`.
fn plugin_gpus(devices: &[EpDevice], vendor: Vendor) -> Vec<EpDevice> {
    devices.iter().filter(|d| d.is_plugin() && d.gpu_vendor() == Some(vendor)).cloned().collect()
}

fn add_plugins(providers: &mut Vec<Planned>, reasons: &mut Vec<String>, devices: Vec<EpDevice>) {
    for d in devices {
        reasons.push(format!("{d}: requested"));
        providers.push(Planned::Plugin(d));
    }
}

fn cpu_plan(reasons: Vec<String>) -> Plan {
    Plan {
        vendor: Vendor::Cpu,
        providers: vec![Planned::Builtin(Provider::Cpu)],
        reasons,
        forced: false,
        refusal: None,
    }
}

fn gpu_plan(vendor: Vendor, mut providers: Vec<Planned>, mut reasons: Vec<String>, forced: bool) -> Plan {
    providers.push(Planned::Builtin(Provider::Cpu));
    reasons.push(if forced {
        "CPU: registered last for the operators the GPU provider lacks; if the GPU provider fails, that is an error (forced)".to_owned()
    } else {
        "CPU: registered last; it takes over if the GPU providers fail".to_owned()
    });
    Plan { vendor, providers, reasons, forced, refusal: None }
}

fn refused(vendor: Vendor, why: &str) -> Plan {
    Plan { vendor, providers: Vec::new(), reasons: vec![why.to_owned()], forced: true, refusal: Some(why.to_owned()) }
}

fn amd_providers() -> Vec<Planned> {
    vec![Planned::Builtin(Provider::MiGraphX), Planned::Builtin(Provider::Rocm)]
}

/// Called only when `Compiled::rocm()` holds, which a build without the `rocm` feature never does.
fn auto_amd(builtin: bool, plugins: Vec<EpDevice>, mut reasons: Vec<String>) -> Plan {
    let mut providers = if builtin { amd_providers() } else { Vec::new() };
    add_plugins(&mut providers, &mut reasons, plugins);
    gpu_plan(Vendor::Amd, providers, reasons, false)
}

fn forced_amd(compiled: Compiled, rocm: &VendorState, plugins: Vec<EpDevice>, mut reasons: Vec<String>) -> Plan {
    if !compiled.rocm() {
        return refused(Vendor::Amd, AMD_NOT_COMPILED);
    }
    reasons.push(format!("ROCm: requested because the device is forced to rocm (probe: {})", rocm.summary));
    let mut providers = amd_providers();
    add_plugins(&mut providers, &mut reasons, plugins);
    gpu_plan(Vendor::Amd, providers, reasons, true)
}

#[cfg(test)]
mod tests;

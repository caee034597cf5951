//! Pure policy: turns what this build contains, what the probe found and what the user asked for
//! into an ordered execution-provider plan, with a reason line for every choice and every skip.
//!
//! It does no I/O, cannot fail, and knows nothing of ONNX Runtime or of how libraries are found:
//! its inputs are plain values, so every combination is tested as a table.

#![forbid(unsafe_code)]

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

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

/// Where the model runs: the plan's intended vendor, or what really ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Vendor {
    Cpu,
    Cuda,
    Rocm,
}

impl Vendor {
    pub fn label(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
            Self::Rocm => "rocm",
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
            Self::MiGraphX | Self::Rocm => Vendor::Rocm,
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
    /// What the user asked for: the CPU, a GPU vendor, or auto (the design note's
    /// `prefer_gpu = false` is `Device::Cpu`).
    pub device: Device,
    /// Set when the model itself can run well only on the CPU (an int8 model for the CPU): why.
    pub model_cpu_only: Option<String>,
}

/// The ordered providers to register, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Plan {
    /// The vendor the plan aims at.
    pub vendor: Vendor,
    /// In registration order; CPU always last. Empty when `refusal` is set.
    pub providers: Vec<Provider>,
    /// One line per choice and per skip.
    pub reasons: Vec<String>,
    /// The user forced this vendor: running anywhere else is an error, never a substitute.
    pub forced: bool,
    /// Set when the user forced a device this build cannot offer; the embedder must refuse.
    pub refusal: Option<String>,
}

const AMD_NOT_COMPILED: &str = "AMD GPU support is not compiled into this build (add --features embed-ort-rocm)";

/// Makes the plan. Rules (the design note's, plus forcing):
/// - device forced to cpu -> `[CPU]`;
/// - device forced to a GPU -> that vendor's providers, then CPU, `forced`; refused if not compiled;
/// - auto: AMD compiled and available -> `[MIGraphX, ROCm, CPU]`; else CUDA compiled and available
///   -> `[CUDA, CPU]`; else `[CPU]`. AMD wins when both vendors are present.
/// - a model that runs well only on the CPU: forced to a GPU -> refused; auto -> `[CPU]`, with why.
pub fn plan(inputs: &Inputs) -> Plan {
    let Inputs { compiled, cuda, rocm, device, model_cpu_only } = inputs;
    let mut reasons = Vec::new();
    if let Some(why) = model_cpu_only {
        match device {
            Device::Cuda | Device::Rocm => {
                let vendor = if *device == Device::Cuda { Vendor::Cuda } else { Vendor::Rocm };
                return refused(
                    vendor,
                    &format!("{why}: run it with --device cpu (or auto), or run the float32 model on the GPU"),
                );
            }
            Device::Auto if (compiled.cuda() && cuda.available) || (compiled.rocm() && rocm.available) => {
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
            gpu_plan(Vendor::Cuda, vec![Provider::Cuda], reasons, true)
        }
        Device::Rocm => forced_amd(*compiled, rocm, reasons),
        Device::Auto => {
            if compiled.rocm() {
                if rocm.available {
                    reasons.push(format!("ROCm: requested ({})", rocm.summary));
                    if compiled.cuda() && cuda.available {
                        reasons.push("CUDA: skipped because an AMD GPU is available and comes first".to_owned());
                    }
                    return auto_amd(reasons);
                }
                reasons.push(format!("ROCm: skipped ({})", rocm.summary));
            } else {
                reasons.push(format!("AMD: skipped: {AMD_NOT_COMPILED}"));
            }
            if !compiled.cuda() {
                reasons.push("CUDA: skipped: not compiled into this build".to_owned());
            } else if cuda.available {
                reasons.push(format!("CUDA: requested ({})", cuda.summary));
                return gpu_plan(Vendor::Cuda, vec![Provider::Cuda], reasons, false);
            } else {
                reasons.push(format!("CUDA: skipped ({})", cuda.summary));
            }
            reasons.push("CPU: chosen because no GPU is available".to_owned());
            cpu_plan(reasons)
        }
    }
}

fn cpu_plan(reasons: Vec<String>) -> Plan {
    Plan { vendor: Vendor::Cpu, providers: vec![Provider::Cpu], reasons, forced: false, refusal: None }
}

fn gpu_plan(vendor: Vendor, mut providers: Vec<Provider>, mut reasons: Vec<String>, forced: bool) -> Plan {
    providers.push(Provider::Cpu);
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

fn amd_providers() -> Vec<Provider> {
    vec![Provider::MiGraphX, Provider::Rocm]
}

/// Called only when `Compiled::rocm()` holds, which a build without the `rocm` feature never does.
fn auto_amd(reasons: Vec<String>) -> Plan {
    gpu_plan(Vendor::Rocm, amd_providers(), reasons, false)
}

fn forced_amd(compiled: Compiled, rocm: &VendorState, mut reasons: Vec<String>) -> Plan {
    if !compiled.rocm() {
        return refused(Vendor::Rocm, AMD_NOT_COMPILED);
    }
    reasons.push(format!("ROCm: requested because the device is forced to rocm (probe: {})", rocm.summary));
    gpu_plan(Vendor::Rocm, amd_providers(), reasons, true)
}

#[cfg(test)]
mod tests;

//! How the session was built and what really runs it, as plain data: `SessionReport`,
//! `Registration`, `OrtInfo`, `Memory`, `Placement`, the plugins and ONNX Runtime's device list,
//! and TEI's `Token`. Nothing here does I/O or fails.

use std::path::PathBuf;

use nornir_ep_select::{EpDevice, Plan, Provider, Vendor};
use nornir_gpu_probe::ProviderRequirements;
use serde::{Deserialize, Serialize};

/// What registering one provider did. In JSON: `{"provider", "ok", "error", "preflight"}`, with
/// `error` only when `ok` is false.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(into = "RegistrationJson", from = "RegistrationJson")]
#[non_exhaustive]
pub struct Registration {
    /// As ONNX Runtime names it (`CUDAExecutionProvider`).
    pub provider: String,
    /// Registered, or why not.
    pub outcome: RegistrationOutcome,
    /// The provider library's NEEDED list checked against this machine.
    pub preflight: Option<ProviderRequirements>,
}

/// Whether a provider registered, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistrationOutcome {
    /// ONNX Runtime accepted it (which does not yet mean it runs the model: see the report's
    /// active provider).
    Registered,
    /// ONNX Runtime's error text, with the preflight's finding where it explains it.
    Failed(String),
}

impl Registration {
    pub(crate) fn failed(provider: Provider, why: String) -> Self {
        Self { provider: provider.ort_name().to_owned(), outcome: RegistrationOutcome::Failed(why), preflight: None }
    }

    /// Whether ONNX Runtime accepted it.
    pub fn registered(&self) -> bool {
        self.outcome == RegistrationOutcome::Registered
    }

    /// Why it did not register.
    pub fn error(&self) -> Option<&str> {
        match &self.outcome {
            RegistrationOutcome::Registered => None,
            RegistrationOutcome::Failed(why) => Some(why),
        }
    }
}

/// [`Registration`] as JSON has always had it.
#[derive(Serialize, Deserialize)]
struct RegistrationJson {
    provider: String,
    ok: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    preflight: Option<ProviderRequirements>,
}

impl From<Registration> for RegistrationJson {
    fn from(r: Registration) -> Self {
        let (ok, error) = match r.outcome {
            RegistrationOutcome::Registered => (true, None),
            RegistrationOutcome::Failed(why) => (false, Some(why)),
        };
        Self { provider: r.provider, ok, error, preflight: r.preflight }
    }
}

impl From<RegistrationJson> for Registration {
    fn from(j: RegistrationJson) -> Self {
        let outcome = if j.ok {
            RegistrationOutcome::Registered
        } else {
            RegistrationOutcome::Failed(j.error.unwrap_or_else(|| "failed".to_owned()))
        };
        Self { provider: j.provider, outcome, preflight: j.preflight }
    }
}

/// Which provider ran each node of the graph, from ONNX Runtime's own profiling record
/// ([`Embedder::placement`](crate::Embedder::placement), on demand: it costs a session build).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
#[non_exhaustive]
pub enum Placement {
    /// From the profile of one run.
    Known {
        /// Nodes run, by provider.
        nodes: std::collections::BTreeMap<String, usize>,
    },
    /// The profile could not be read.
    Unknown {
        /// Why.
        reason: String,
    },
}

impl Placement {
    /// When the profile shows that `provider` ran none of the graph's nodes: the provider that
    /// ran the most of them and a sentence saying so. A provider registered first is only
    /// offered the nodes; the ones it does not claim go to the next, down to the CPU.
    pub fn unclaimed(&self, provider: &str) -> Option<(String, String)> {
        let Self::Known { nodes } = self else { return None };
        if nodes.get(provider).copied().unwrap_or(0) > 0 {
            return None;
        }
        let (main, _) = nodes.iter().max_by_key(|(_, n)| **n)?;
        let total: usize = nodes.values().sum();
        Some((
            main.clone(),
            format!(
                "{provider} registered, but ONNX Runtime gave it none of the model's {total} nodes; {main} runs them"
            ),
        ))
    }
}

/// What the model's sessions hold in memory, so that an operator can size a process.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Memory {
    /// How many workers run each ONNX Runtime session at once. On the CPU every worker
    /// (`EmbedderOptions::sessions`) runs the model's one session, so its weights and the
    /// kernels' pre-packed forms of them are in memory once; each further worker adds only the
    /// activations of the batch it runs. A GPU session runs one batch at a time.
    pub workers_per_session: usize,
    /// How much the process's resident memory grew while each session was built, in build order,
    /// in bytes: the weights as the session holds them (an int8-stored model's are folded to
    /// float32 at load), their pre-packed forms, and the graph. One entry on the CPU. Further GPU
    /// sessions are built at their first work (or `Embedder::warm_up`). Read from
    /// `/proc/self/status`, so other threads' allocations at the same moment count as well.
    pub session_growth_bytes: Vec<u64>,
    /// The process's resident memory when the report was made, in bytes.
    pub resident_bytes: Option<u64>,
    /// The most resident memory the process has held so far (`VmHWM`), in bytes: the model with
    /// the activations and ONNX Runtime's arena of the largest batches run so far.
    #[serde(default)]
    pub peak_resident_bytes: Option<u64>,
}

/// What really happened when the session was built.
///
/// ```no_run
/// # use nornir_embed::{Embedder, EmbedderOptions};
/// let embedder = Embedder::new("models/all-MiniLM-L6-v2".as_ref(), &EmbedderOptions::default())?;
/// let report = embedder.report();
/// for r in &report.registrations {
///     match r.error() {
///         None => println!("{}: registered", r.provider),
///         Some(why) => println!("{}: failed: {why}", r.provider),
///     }
/// }
/// // What runs, not what was asked for; and why the CPU took over, if it did.
/// println!("running on {} ({:?})", report.active_provider, report.fallback);
/// # Ok::<(), nornir_embed::EmbedError>(())
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionReport {
    /// The ONNX Runtime library loaded.
    pub ort: OrtInfo,
    /// What the policy asked for, and why.
    pub plan: Plan,
    /// Each provider tried, in order.
    pub registrations: Vec<Registration>,
    /// The provider running the model, as ONNX Runtime names it.
    pub active_provider: String,
    /// For a plugin provider: the device it runs on, with its library, vendor and device id.
    #[serde(default)]
    pub active_device: Option<EpDevice>,
    /// ONNX Runtime's own device list and the plugin libraries registered: the second witness
    /// beside the probe.
    #[serde(default)]
    pub devices: DeviceList,
    /// `cpu`, `cuda` or `rocm`: where the model really runs.
    pub gpu_vendor: Vendor,
    /// Set when the session had to be rebuilt on CPU after a GPU session failed to build or run.
    pub fallback: Option<String>,
    /// What the sessions hold in memory.
    #[serde(default)]
    pub memory: Memory,
    /// ONNX Runtime's graph optimisation level for the session: `basic` on the CPU, `all` with
    /// a GPU provider (see `base_builder`).
    #[serde(default)]
    pub graph_optimization: String,
}

impl SessionReport {
    /// The session runs on ONNX Runtime's own CPU provider alone (not a GPU, not a plugin).
    pub(crate) fn on_builtin_cpu(&self) -> bool {
        self.active_provider == Provider::Cpu.ort_name()
    }
}

/// The oldest ONNX Runtime this build loads: 1.22, the last with the ROCm provider.
pub const MIN_ORT: (u64, u64) = (1, 22);

/// What was loaded and why. Serialised under `ort` in `doctor --json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OrtInfo {
    /// The library file loaded.
    pub path: PathBuf,
    /// As the library itself reports it (`OrtGetApiBase()->GetVersionString()`).
    pub version: String,
    /// Providers whose `libonnxruntime_providers_<name>.so` sits beside the library.
    pub providers: Vec<String>,
    /// Why this library was chosen.
    pub reason: String,
}

/// One token of a text, as TEI's `/tokenize` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Token {
    /// Its id in the model's vocabulary.
    pub id: u32,
    /// The text it stands for (the token's own spelling for a special token).
    pub text: String,
    /// A special token (`[CLS]`, `[SEP]`, ...), not from the text.
    pub special: bool,
    /// Byte offsets in the text with its prompt: its first byte, and past its last.
    pub start: usize,
    /// See `start`.
    pub stop: usize,
}

/// One plugin execution-provider library: where it came from, and what registering it with
/// ONNX Runtime did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PluginReport {
    /// The name it was registered under.
    pub name: String,
    /// The library file (the package folder when none in it is a plugin).
    pub path: PathBuf,
    /// `explicit` (`--ep-lib`, `NORNIR_EP_LIBS`, the options), `python` or `nornir-home`.
    pub source: String,
    /// Why it was not loaded, or failed to register; `None` when ONNX Runtime took it.
    pub error: Option<String>,
    /// The providers on the devices it added to ONNX Runtime's list (`cpu_ep on AMD CPU ...`).
    pub devices: Vec<String>,
    /// How it was tried before this process registered it: `tried first in a process of its
    /// own, by ...`, or `untried: ` and why; `None` when it was not tried (a problem before).
    #[serde(default)]
    pub trial: Option<String>,
}

/// ONNX Runtime's own device list (`GetEpDevices`) after the plugins were registered: the second
/// witness beside the probe.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeviceList {
    /// Every plugin library found or named, in the order tried.
    pub plugins: Vec<PluginReport>,
    /// Every (provider, device) pair ONNX Runtime lists, built-in ones included.
    pub devices: Vec<EpDevice>,
    /// Why the list could not be read, if it could not.
    pub error: Option<String>,
}

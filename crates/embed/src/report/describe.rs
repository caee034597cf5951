//! The one report of an embedder that every surface writes: `doctor --json`'s session, the
//! server's `/info`, Python's `report()` and `bench --json`. Its keys are always present (null
//! where a value is not known), so a script reads the same shape everywhere.

use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::values::{ModelFolder, ModelInfo, Placement, SessionReport};

/// Everything nornir knows about a loaded embedder: the session (what runs and why, flattened
/// into the same object), the model, the workers, how the weights are stored, the CPU's int8
/// extensions and, when profiled, which provider ran each node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EmbedderReport {
    /// What runs the model and why; its keys sit beside the others in JSON.
    #[serde(flatten)]
    pub session: SessionReport,
    /// What nornir read from the model folder and the graph, and why.
    pub model: ModelInfo,
    /// Batches run side by side.
    pub workers: usize,
    /// How the weights are stored, as far as the folder says ([`precision`]).
    pub precision: String,
    /// The CPU extensions ONNX Runtime's int8 kernels can use, best first ([`cpu_int8_extensions`]).
    pub cpu_int8_extensions: Vec<String>,
    /// Set when the provider registered first ran none of the model's nodes: why (the session's
    /// `active_provider` then names the one that ran them). Known only with `placement`.
    pub unclaimed: Option<String>,
    /// Which provider ran each node of one profiled run; `None` unless asked for
    /// ([`Embedder::describe_with_placement`](crate::Embedder::describe_with_placement)).
    pub placement: Option<Placement>,
    /// The int8 and uint8 ranges in use: given, and calibrated so far.
    pub ranges: RangesReport,
    /// An image-and-text model's image processor settings and vision graph, one line; `None`
    /// for a text-only model.
    pub images: Option<String>,
}

/// The int8 and uint8 ranges an embedder calibrated, by vector width and normalisation, kept for
/// its life (the compact calls' rule 2).
pub(crate) type Calibrations =
    std::sync::Mutex<std::collections::BTreeMap<(usize, bool), std::sync::Arc<nornir_options::Ranges>>>;

impl EmbedderReport {
    pub(crate) fn of(engine: &Engine, calibrated: &Calibrations, images: Option<String>) -> Self {
        Self {
            session: engine.report(),
            model: engine.model_info().clone(),
            workers: engine.workers,
            precision: precision(&engine.model_info().folder),
            cpu_int8_extensions: cpu_int8_extensions().into_iter().map(str::to_owned).collect(),
            unclaimed: None,
            placement: None,
            ranges: RangesReport::of(engine, calibrated),
            images,
        }
    }

    /// With `placement`: what really runs. A provider that claimed no node runs nothing, so the
    /// one that ran the most nodes becomes the active provider, and `unclaimed` and `fallback`
    /// say why.
    pub(crate) fn with_placement(mut self, placement: Placement) -> Self {
        let s = &mut self.session;
        if let Some((main, why)) = placement.unclaimed(&s.active_provider) {
            s.active_provider = main;
            s.active_device = None;
            s.fallback = Some(s.fallback.take().map_or(why.clone(), |f| format!("{f}; {why}")));
            self.unclaimed = Some(why);
        }
        self.placement = Some(placement);
        self
    }
}

/// `"2 Gelu, 6 Attention"`: how many of each name, in first-seen order.
pub fn fusion_counts<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for name in names {
        match counts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => counts.push((name, 1)),
        }
    }
    counts.iter().map(|(n, c)| format!("{c} {n}")).collect::<Vec<_>>().join(", ")
}

/// How the model's weights are stored, as far as its folder says (`quantization.json`), with a
/// warning where int8 weights meet a CPU whose int8 kernel saturates.
pub fn precision(f: &ModelFolder) -> String {
    let Some(q) = &f.quantization else { return "as exported (no quantization.json)".to_owned() };
    let weights = q.weights.as_deref().unwrap_or("int8");
    let saturates = weights == "int8" && !multiplies_bytes_into_32_bits();
    let counts = fusion_counts(q.fused.iter().map(String::as_str));
    let fused = if counts.is_empty() { String::new() } else { format!("; fused: {counts}") };
    format!(
        "{} for the {} ({}, {weights} weights, activations {}{fused}; from quantization.json){}",
        q.format,
        q.target,
        q.operator.as_deref().unwrap_or("operator not recorded"),
        q.activations.as_deref().unwrap_or("per-tensor"),
        if saturates {
            "; this CPU has no VNNI, and ONNX Runtime's AVX2 kernel for int8 weights adds products in 16 bits, \
             which saturate: quantize again here (`nornir vector quantize` picks uint8 weights on such a CPU)"
        } else {
            ""
        }
    )
}

/// The CPU multiplies bytes straight into 32-bit sums (AVX-512 VNNI or AVX-VNNI on x86; every
/// other architecture nornir runs on), as `nornir-quantize`'s `WeightType::for_this_cpu` asks.
fn multiplies_bytes_into_32_bits() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512vnni") || std::arch::is_x86_feature_detected!("avxvnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    true
}

/// The CPU extensions ONNX Runtime's int8 kernels can use, best first. ONNX Runtime picks among
/// them itself and does not report which it picked. Read from `/proc/cpuinfo` once per process
/// (every report carries them; the server's `/info` asks on every request).
pub fn cpu_int8_extensions() -> Vec<&'static str> {
    static EXTENSIONS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    EXTENSIONS
        .get_or_init(|| {
            let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
            let flags: Vec<&str> = info
                .lines()
                .find(|l| l.starts_with("flags"))
                .map(|l| l.split_whitespace().collect())
                .unwrap_or_default();
            [("amx_int8", "AMX-INT8"), ("avx512_vnni", "AVX-512 VNNI"), ("avx_vnni", "AVX-VNNI"), ("avx2", "AVX2")]
                .into_iter()
                .filter(|(flag, _)| flags.contains(flag))
                .map(|(_, name)| name)
                .collect()
        })
        .clone()
}

/// Which int8 and uint8 ranges an embedder uses: those it was given, and those it calibrated so
/// far (`/info`'s and `report()`'s `ranges`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RangesReport {
    /// The ranges the embedder was built with (their source and width), if any.
    pub given: Option<RangesUse>,
    /// Ranges calibrated on the built-in sample, one per width and normalisation asked so far.
    pub calibrated: Vec<RangesUse>,
}

/// One set of ranges in use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RangesUse {
    /// Vector width they cover.
    pub dimensions: usize,
    /// Whether they were calibrated on normalised vectors (`None` for given ranges).
    pub normalized: Option<bool>,
    /// Where they came from.
    pub source: String,
}

impl RangesReport {
    pub(crate) fn of(engine: &Engine, calibrated: &Calibrations) -> Self {
        let given = &engine.call_defaults.ranges;
        let given = given.as_ref().map(|r| RangesUse {
            dimensions: r.dimensions(),
            normalized: None,
            source: r.source().to_owned(),
        });
        let calibrated = calibrated.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let calibrated = calibrated
            .iter()
            .map(|(&(dimensions, normalized), r)| RangesUse {
                dimensions,
                normalized: Some(normalized),
                source: r.source().to_owned(),
            })
            .collect();
        Self { given, calibrated }
    }
}

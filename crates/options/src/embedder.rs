//! [`EmbedderOptions`]: how to build an embedder, with `with_*` builders; what its calls get by
//! default is a [`CallOptions`].

use std::path::PathBuf;
use std::time::Duration;

use nornir_ep_select::Device;

use crate::InvalidOption;
use crate::call::CallOptions;
use crate::pooling::Pooling;

/// How to build an `Embedder`. `Default` is: device auto (a GPU when one really works), all cores, a
/// 256-token budget per batch, and the model folder's own length limit, pooling, normalisation
/// and default prompt.
///
/// ```
/// use std::time::Duration;
/// use nornir_options::{CallOptions, EmbedderOptions, QueueFull};
/// use nornir_ep_select::Device;
///
/// // A server's embedder: CPU, 4 threads for 2 batches at once, refuse rather than queue past
/// // 10,000 texts.
/// let options = EmbedderOptions::default()
///     .with_device(Device::Cpu)
///     .with_threads(4)
///     .with_workers(2)
///     .with_max_queued_texts(10_000)
///     .with_queue_full(QueueFull::Refuse)
///     .with_batch_wait(Duration::from_millis(2))
///     // What every call that does not say otherwise gets: no prompt, 256 dimensions.
///     .with_call(CallOptions::new().with_prompt("").with_dimensions(256));
/// assert_eq!(options.threads, Some(4));
/// assert_eq!(options.call.dimensions, Some(256));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EmbedderOptions {
    /// Where to run: auto (a GPU that works, else the CPU), the CPU, or a forced GPU vendor.
    pub device: Device,
    /// Threads for the model in all; `None` = the machine's cores. On the CPU the `workers`
    /// batches running at once share them.
    pub threads: Option<usize>,
    /// Batches run side by side, each by a worker of its own. On the CPU every worker runs the
    /// model's one ONNX Runtime session (its weights are in memory once; each worker adds the
    /// activations of its batch), and the workers share `threads`: a batch running alone gets
    /// all but one thread per other worker. On a GPU each worker has a session of its own.
    /// `None` = on the CPU, half the threads and at least two (1 thread: one); on a GPU, one.
    /// What the default buys is measured in `docs/performance.md`.
    pub workers: Option<usize>,
    /// Most tokens (texts x longest length) in one batch.
    pub token_budget: usize,
    /// Truncation length; `None` = the model's `max_seq_length`, then the tokenizer's, then
    /// `max_position_embeddings`.
    pub max_length: Option<usize>,
    /// `None` = the model's pooling config, else mean.
    pub pooling: Option<Pooling>,
    /// The graph output to read, instead of nornir's choice (see `ModelInfo::output_reason`).
    pub output_name: Option<String>,
    /// The task of a model with task adapters (jina-embeddings-v3's `lora_adaptations`):
    /// fed to its `task_id` input; its instruction goes before every text.
    pub task: Option<String>,
    /// What a call gets for every option it leaves `None`: the prompt (`None` = the task's
    /// instruction, else the folder's `default_prompt_name`, if any), normalisation (`None` = as
    /// the folder says: normalised when `modules.json` lists a Normalize module or when there is
    /// no `modules.json`), Matryoshka `dimensions`, truncation or chunking, `precision` and the
    /// `ranges` of int8 and uint8 (`None`: calibrated once per width and normalisation, see
    /// `Embedder::ranges_for`).
    pub call: CallOptions,
    /// Most texts waiting in the queue that every call feeds (a call larger than this still runs,
    /// alone). About 1.6 KB each for a 384-wide model with 256-token texts.
    pub max_queued_texts: usize,
    /// What a call that would pass `max_queued_texts` does: wait for room, or fail at once with
    /// `EmbedError::Overloaded`.
    pub queue_full: QueueFull,
    /// Under load (every worker busy), how long a free worker may wait for more texts to fill
    /// a batch before running what is there. An idle embedder never waits.
    pub batch_wait: Duration,
    /// Model file name relative to the folder, instead of `model.onnx` / `onnx/model.onnx`.
    pub model_file: Option<PathBuf>,
    /// The ONNX Runtime library to load, instead of discovery (like `ORT_DYLIB_PATH`).
    pub ort_library: Option<PathBuf>,
    /// Execution providers to try in this order, then the CPU, by ONNX Runtime name (built-in,
    /// `CUDAExecutionProvider`, or a plugin's, `cpu_ep`); empty = the plan for `device`.
    pub providers: Vec<String>,
    /// Plugin execution-provider libraries to register, as (name, path), before those found in
    /// `NORNIR_EP_LIBS`, pip's `site-packages` and `$NORNIR_HOME/ep`.
    pub ep_libraries: Vec<(String, PathBuf)>,
}

impl Default for EmbedderOptions {
    fn default() -> Self {
        Self {
            device: Device::Auto,
            threads: None,
            workers: None,
            token_budget: 256,
            max_length: None,
            pooling: None,
            output_name: None,
            task: None,
            call: CallOptions::default(),
            max_queued_texts: 65_536,
            queue_full: QueueFull::Wait,
            batch_wait: Duration::ZERO,
            model_file: None,
            ort_library: None,
            providers: Vec::new(),
            ep_libraries: Vec::new(),
        }
    }
}

impl EmbedderOptions {
    /// The defaults, with the device taken from `NORNIR_DEVICE` and the providers from
    /// `NORNIR_PROVIDERS` (comma-separated) when set. (`NORNIR_EP_LIBS` is read wherever plugins
    /// are found, options or not.)
    pub fn from_env() -> Result<Self, InvalidOption> {
        let mut o = Self::default();
        if let Ok(v) = std::env::var("NORNIR_DEVICE") {
            o.device = v.parse().map_err(|e| InvalidOption::new("device", format!("NORNIR_DEVICE: {e}")))?;
        }
        if let Ok(v) = std::env::var("NORNIR_PROVIDERS") {
            o.providers = v.split(',').map(str::trim).filter(|p| !p.is_empty()).map(str::to_owned).collect();
        }
        Ok(o)
    }

    /// The original design's `load_with(prefer_gpu)` (docs/design.md): `false` runs on the CPU (`Device::Cpu`);
    /// `true` turns a CPU device back into auto and leaves auto or a forced GPU as they are.
    pub fn with_prefer_gpu(mut self, prefer_gpu: bool) -> Self {
        if !prefer_gpu {
            self.device = Device::Cpu;
        } else if self.device == Device::Cpu {
            self.device = Device::Auto;
        }
        self
    }
    /// Where to run: `Auto` (a GPU that works, else the CPU), `Cpu`, or a forced GPU.
    pub fn with_device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }
    /// Threads for the model in all (at least 1).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads);
        self
    }
    /// Batches run side by side (at least 1): see [`workers`](Self::workers).
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = Some(workers);
        self
    }
    /// Most tokens in one batch (at least 1).
    pub fn with_token_budget(mut self, tokens: usize) -> Self {
        self.token_budget = tokens;
        self
    }
    /// Truncation length in tokens (at least 1).
    pub fn with_max_length(mut self, tokens: usize) -> Self {
        self.max_length = Some(tokens);
        self
    }
    /// Pool this way instead of as the folder says.
    pub fn with_pooling(mut self, pooling: Pooling) -> Self {
        self.pooling = Some(pooling);
        self
    }
    /// Read this graph output.
    pub fn with_output_name(mut self, name: impl Into<String>) -> Self {
        self.output_name = Some(name.into());
        self
    }
    /// What every call gets for the options it leaves `None` (see [`call`](Self::call)).
    pub fn with_call(mut self, call: CallOptions) -> Self {
        self.call = call;
        self
    }
    /// Run this task of a model with task adapters (jina-embeddings-v3).
    pub fn with_task(mut self, task: impl Into<String>) -> Self {
        self.task = Some(task.into());
        self
    }
    /// Most texts waiting to run, across all calls (at least 1).
    pub fn with_max_queued_texts(mut self, texts: usize) -> Self {
        self.max_queued_texts = texts;
        self
    }
    /// Wait for room or refuse when the queue is full.
    pub fn with_queue_full(mut self, full: QueueFull) -> Self {
        self.queue_full = full;
        self
    }
    /// How long a free worker may wait under load to fill a batch.
    pub fn with_batch_wait(mut self, wait: Duration) -> Self {
        self.batch_wait = wait;
        self
    }
    /// Refuses a value no embedder can be built with, naming the option. `Embedder::new`
    /// calls it first; what depends on the model (`dimensions` wider than its vectors) is checked
    /// when the model is loaded.
    pub fn validate(&self) -> Result<(), InvalidOption> {
        let at_least_one = [
            ("token_budget", Some(self.token_budget), "must be at least 1"),
            ("threads", self.threads, "must be at least 1 (or leave it unset for all cores)"),
            ("workers", self.workers, "must be at least 1 (or leave it unset)"),
            ("max_queued_texts", Some(self.max_queued_texts), "must be at least 1"),
            ("dimensions", self.call.dimensions, "must be at least 1"),
            ("max_length", self.max_length, "must be at least 1"),
        ];
        for (option, value, reason) in at_least_one {
            if value == Some(0) {
                return Err(InvalidOption::new(option, reason));
            }
        }
        if self.providers.iter().any(|p| p.trim().is_empty()) {
            return Err(InvalidOption::new(
                "providers",
                "a provider name is empty: give ONNX Runtime names, e.g. cpu_ep",
            ));
        }
        if let Some((name, _)) = self.ep_libraries.iter().find(|(n, p)| n.trim().is_empty() || p.as_os_str().is_empty())
        {
            return Err(InvalidOption::new("ep_libraries", format!("entry {name:?} needs a name and a path")));
        }
        // A library named by the caller is meant: a missing one is a mistake to say, not a
        // plugin to skip (those found by searching are skipped with the reason).
        if let Some((name, path)) = self.ep_libraries.iter().find(|(_, p)| !p.is_file()) {
            return Err(InvalidOption::new(
                "ep_libraries",
                format!("{name}={}: no such file; give the path of the plugin's shared library", path.display()),
            ));
        }
        Ok(())
    }
    /// The model's file inside its folder, instead of `model.onnx` / `onnx/model.onnx`.
    pub fn with_model_file(mut self, file: impl Into<PathBuf>) -> Self {
        self.model_file = Some(file.into());
        self
    }
    /// The ONNX Runtime library to load, instead of discovery.
    pub fn with_ort_library(mut self, library: impl Into<PathBuf>) -> Self {
        self.ort_library = Some(library.into());
        self
    }
    /// Execution providers to try in this order, then the CPU (ONNX Runtime names).
    pub fn with_providers<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.providers = names.into_iter().map(Into::into).collect();
        self
    }
    /// A plugin execution-provider library to register under `name`.
    pub fn with_ep_library(mut self, name: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        self.ep_libraries.push((name.into(), path.into()));
        self
    }
}

/// How many batches run side by side on the CPU with `threads` threads by default: half the
/// threads, at least two (one for one thread): 2, 4 and 8 workers on 4, 8 and 16 cores, each
/// batch with at least two threads. The timings this rule rests on, with their date and CPU, are
/// in `docs/performance.md` (Memory).
pub fn default_cpu_workers(threads: usize) -> usize {
    if threads >= 2 { (threads / 2).max(2) } else { 1 }
}

/// ONNX Runtime's intra-op threads for a session that `workers` run at once, out of `threads`
/// in all: each running worker's own thread computes too, so the pool has the rest. A lone run
/// then uses `threads - workers + 1` threads, and runs side by side share the pool.
pub fn intra_threads(threads: usize, workers: usize) -> usize {
    (threads + 1).saturating_sub(workers).max(1)
}

/// What to do with a call that would take the queue past its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueFull {
    /// Wait until there is room (the default for the library).
    #[default]
    Wait,
    /// Fail at once with `EmbedError::Overloaded` (what a server wants: answer 503 and let the
    /// client or the load balancer retry).
    Refuse,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `prefer_gpu` is the design's (docs/design.md) spelling of the device, not a second switch beside it.
    #[test]
    fn prefer_gpu_is_a_device() {
        let cpu = EmbedderOptions::default().with_prefer_gpu(false);
        assert_eq!(cpu.device, Device::Cpu);
        assert_eq!(cpu.with_prefer_gpu(true).device, Device::Auto);
        let forced = EmbedderOptions::default().with_device(Device::Cuda);
        assert_eq!(forced.clone().with_prefer_gpu(true).device, Device::Cuda);
        assert_eq!(forced.with_prefer_gpu(false).device, Device::Cpu);
    }

    #[test]
    fn cpu_workers_and_their_threads_follow_the_core_count() {
        // (threads, default workers, ONNX Runtime intra-op threads of the shared session)
        for (threads, workers, intra) in [(1, 1, 1), (2, 2, 1), (3, 2, 2), (4, 2, 3), (8, 4, 5), (16, 8, 9)] {
            assert_eq!(default_cpu_workers(threads), workers, "{threads} threads");
            assert_eq!(intra_threads(threads, workers), intra, "{threads} threads");
            // Every worker's own thread and the pool's together are the threads asked for.
            assert_eq!(workers + intra - 1, threads, "{threads} threads");
        }
        assert_eq!(intra_threads(2, 8), 1, "more workers than threads: one thread each");
    }

    /// Every option an embedder cannot be built with is refused by name, before any loading.
    #[test]
    fn validate_names_the_option() {
        let invalid = |o: EmbedderOptions| match o.validate() {
            Err(InvalidOption { option, .. }) => option,
            other => panic!("{other:?}"),
        };
        let d = EmbedderOptions::default;
        assert!(d().validate().is_ok());
        assert_eq!(invalid(d().with_threads(0)), "threads");
        assert_eq!(invalid(d().with_workers(0)), "workers");
        assert_eq!(invalid(d().with_token_budget(0)), "token_budget");
        assert_eq!(invalid(d().with_max_queued_texts(0)), "max_queued_texts");
        assert_eq!(invalid(d().with_call(CallOptions::new().with_dimensions(0))), "dimensions");
        assert_eq!(invalid(d().with_max_length(0)), "max_length");
        // A plugin library the caller names must be there (stands in for a mistyped --ep-lib).
        assert_eq!(invalid(d().with_ep_library("cpu", "/nonexistent/libcpu_plugin.so")), "ep_libraries");
        let me = std::env::current_exe().expect("this test's binary");
        assert!(d().with_ep_library("cpu", me).validate().is_ok(), "a file that exists is tried later, not here");
    }
}

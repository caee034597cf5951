//! Opening a static model (Model2Vec): its table read and checked against its tokenizer, no ONNX
//! Runtime loaded, the plan on the CPU with the reason, then the same first run as a graph's.

use std::path::Path;
use std::sync::Mutex;

use nornir_ep_select::Vendor;

use crate::engine::open::{GraphFacts, model_info};
use crate::engine::{Backend, Engine};
use crate::error::{EmbedError, Result};
use crate::forward::graph_io::{GraphIo, OutputType};
use crate::load::multi_vector::TokenModel;
use crate::load::plan::plan_with;
use crate::load::prompt::choose_prompt;
use crate::load::static_model::{self, StaticLayout};
use crate::load::tokenize::ModelTokenizer;
use crate::math::dense::DenseHead;
use crate::schedule::queue::BatchPolicy;
use crate::schedule::scheduler::Scheduler;
use crate::schedule::stats::Counters;
use crate::values::{DeviceList, Memory, Modules, OrtInfo, SessionReport};
use nornir_options::{EmbedderOptions, Pooling, default_cpu_workers};

/// What `active_provider` says for a static model.
pub(crate) const STATIC_PROVIDER: &str = "nornir static table (CPU, no ONNX Runtime)";

impl Engine {
    /// Opens the static model of `layout` in `dir`.
    pub(crate) fn open_static(
        dir: &Path,
        layout: StaticLayout,
        options: &EmbedderOptions,
    ) -> Result<(Self, TokenModel)> {
        refuse_graph_options(options)?;
        let plan = plan_with(options.device, Some(static_model::ON_THE_CPU.to_owned()), &[], &options.providers);
        if let Some(why) = &plan.refusal {
            return Err(EmbedError::DeviceRefused { reason: why.clone() });
        }
        let settings = static_model::settings(dir, &layout)?;
        let mut folder = static_model::folder(dir, &layout, settings.max_length);
        let tokenizer = ModelTokenizer::load(&folder, options.max_length)?.for_static_model(settings.max_length);
        let (vocab, unknown) = (tokenizer.truncating().get_vocab_size(true), tokenizer.unknown_id());
        let table = static_model::read(dir, &layout, vocab, unknown)?;
        folder.hidden_size = Some(table.width);
        folder.modules = Some(Modules { normalize: settings.normalize, ..Modules::default() });
        let prompt = choose_prompt(&folder, options)?;
        let facts = GraphFacts {
            inputs: Vec::new(),
            pooled: false,
            output_reason: "a static model: each token's row of its table".to_owned(),
            one_text_per_run: None,
            attention: "none: a static model's tokens do not attend to each other".to_owned(),
        };
        let (info, row_settings, include_prompt) =
            model_info(folder, prompt, &tokenizer, facts, "embeddings".to_owned(), options)?;
        let threads = options.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
        let workers = options.workers.unwrap_or(default_cpu_workers(threads));
        let report = SessionReport {
            ort: OrtInfo {
                path: Default::default(),
                version: String::new(),
                providers: Vec::new(),
                reason: "not loaded: a static model runs without ONNX Runtime".to_owned(),
            },
            plan,
            registrations: Vec::new(),
            active_provider: STATIC_PROVIDER.to_owned(),
            active_device: None,
            devices: DeviceList::default(),
            gpu_vendor: Vendor::Cpu,
            fallback: None,
            memory: Memory::default(),
            graph_optimization: "none".to_owned(),
        };
        let mut engine = Self {
            backend: Backend::Static(table),
            run_fallback: Mutex::new(None),
            workers,
            session_growth: Mutex::new(Vec::new()),
            tokenizer,
            include_prompt,
            call_defaults: options.call.clone(),
            io: no_graph(),
            settings: row_settings,
            head: DenseHead::default(),
            info,
            report,
            counters: Counters::default(),
            scheduler: Scheduler::new(
                workers,
                options.token_budget,
                BatchPolicy::CPU,
                options.max_queued_texts,
                options.batch_wait,
            ),
            queue_full: options.queue_full,
            images: None,
        };
        engine.check_with_a_first_run(DenseHead::default())?;
        tracing::info!(provider = STATIC_PROVIDER, "static embedder ready");
        Ok((engine, TokenModel::default()))
    }
}

/// The options that name a graph's parts, which a static model has none of.
fn refuse_graph_options(options: &EmbedderOptions) -> Result<()> {
    let refused = [
        ("model_file", options.model_file.is_some()),
        ("output_name", options.output_name.is_some()),
        ("pooling", options.pooling.is_some_and(|p| p != Pooling::Mean)),
    ];
    match refused.iter().find(|(_, given)| *given) {
        Some((option, _)) => Err(EmbedError::invalid(
            option,
            "names a part of an ONNX graph, and this is a static model (Model2Vec): a mean of its table's rows",
        )),
        None => Ok(()),
    }
}

/// The graph's inputs and output for a model that has no graph: token rows, not pooled.
fn no_graph() -> GraphIo {
    GraphIo {
        ids: String::new(),
        mask: None,
        type_ids: None,
        position_ids: None,
        task: None,
        past: Vec::new(),
        use_cache_branch: None,
        int32: false,
        output: 0,
        output_type: OutputType::F32,
        pooled: false,
        output_reason: "a static model: each token's row of its table".to_owned(),
    }
}

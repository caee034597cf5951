//! Opening an engine: the folder read (its Dense head, prompt, tokenizer, token rules), the
//! first session built on the plan, the graph's inputs and output checked against the folder's
//! kind, then one short text run to check the output's width.

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use nornir_ep_select::{Planned, Vendor};
use ort::session::Session;

use crate::engine::{Backend, Engine, Sessions};
use crate::error::{EmbedError, Result};
use crate::forward::graph_io::graph_io;
use crate::forward::run::{Row, RowSettings};
use crate::forward::vision::ImageTower;
use crate::load::dense::load_head;
use crate::load::graph_scan::{Attention, attention, one_text_per_run};
use crate::load::kind;
use crate::load::multi_vector::{SparseHead, TokenModel, TokenRules};
use crate::load::plan::plan_with;
use crate::load::prompt::choose_prompt;
use crate::load::runtime::{OrtRuntime, list_devices, load_runtime};
use crate::load::session::{self, SessionConfig, Slot, growth_since, resident_bytes};
use crate::load::tokenize::ModelTokenizer;
use crate::math::dense::DenseHead;
use crate::schedule::queue::{BatchPolicy, Tiling};
use crate::schedule::scheduler::Scheduler;
use crate::schedule::stats::Counters;
use crate::values::{ModelFolder, ModelInfo, PromptChoice, SessionReport};
use nornir_options::{EmbedderOptions, ModelKind, OutputWidth, Pooling, default_cpu_workers, intra_threads};

/// What the folder gives before any session is built.
struct FolderParts {
    folder: ModelFolder,
    head: DenseHead,
    prompt: PromptChoice,
    tokenizer: ModelTokenizer,
    tokens: TokenModel,
}

/// The first session, built on the plan, and what was chosen on the way.
struct FirstSession {
    runtime: Arc<OrtRuntime>,
    session: Session,
    report: SessionReport,
    workers: usize,
    intra_threads: usize,
    kernel_threads: usize,
    session_growth: Mutex<Vec<u64>>,
    one_text_per_run: Option<String>,
    /// How the graph computes attention ([`attention`]).
    attention: Attention,
    /// The plan the session was built on (a dual encoder's vision graph is built on it too).
    plan: nornir_ep_select::Plan,
}

impl Engine {
    /// Loads the model folder `dir`: probe -> plan -> ONNX Runtime -> session -> checks.
    /// Every mismatch between the folder and the graph is an error here, not at the first embed.
    /// Returns the engine (with a dual encoder's image tower) and what a model that makes token
    /// vectors adds, which their calls hold.
    pub(crate) fn new(dir: &Path, options: &EmbedderOptions) -> Result<(Self, TokenModel)> {
        options.validate()?;
        if let Some(layout) = crate::load::static_model::find(dir)? {
            return Self::open_static(dir, layout, options);
        }
        let FolderParts { mut folder, head, prompt, tokenizer, tokens } = read_folder(dir, options)?;
        let first = build_first_session(&folder, options)?;
        let mut io = graph_io(&first.session, &folder, options.output_name.as_deref())?;
        match (&mut io.task, &prompt.task) {
            (Some(input), Some((_, index))) => input.value = *index,
            (Some(_), None) => {
                return Err(EmbedError::model(
                    &folder.dir,
                    "the graph takes a task_id input but config.json lists no lora_adaptations to choose it from",
                ));
            }
            (None, _) => {}
        }
        let output = first.session.outputs()[io.output].name().to_owned();
        folder.kind = kind::with_graph(std::mem::take(&mut folder.kind), &output, io.pooled)
            .map_err(|e| EmbedError::model(&folder.dir, e))?;
        check_kind_options(&folder, options)?;
        let facts = GraphFacts {
            inputs: first.session.inputs().iter().map(|i| i.name().to_owned()).collect(),
            pooled: io.pooled,
            output_reason: io.output_reason.clone(),
            one_text_per_run: first.one_text_per_run.clone(),
            attention: first.attention.phrase(),
        };
        let (info, settings, include_prompt) = model_info(folder, prompt, &tokenizer, facts, output, options)?;
        let FirstSession {
            runtime,
            session,
            report,
            workers,
            intra_threads,
            kernel_threads,
            session_growth,
            attention,
            plan,
            ..
        } = first;
        let policy = match report.gpu_vendor {
            Vendor::Cpu => BatchPolicy::CPU.with_attention(match attention {
                a if a.tiled_when_padded() => Tiling::Always,
                a if a.tiled_when_unpadded() => Tiling::Unpadded,
                _ => Tiling::Never,
            }),
            _ => BatchPolicy::GPU,
        };
        let kind = info.folder.kind.kind;
        let vocab = tokenizer.truncating().get_vocab_size(true);
        let budget =
            if info.one_text_per_run.is_some() { 1 } else { kind::token_budget(kind, vocab, options.token_budget) };
        let sessions = Sessions {
            first: RwLock::new(Slot::new(session, &report)),
            extra: OnceLock::new(),
            runtime,
            intra_threads,
            kernel_threads,
        };
        let mut engine = Self {
            backend: Backend::Onnx(Box::new(sessions)),
            run_fallback: Mutex::new(None),
            workers,
            session_growth,
            tokenizer,
            include_prompt,
            call_defaults: options.call.clone(),
            io,
            settings,
            head: DenseHead::default(),
            info,
            report,
            counters: Counters::default(),
            scheduler: Scheduler::new(workers, budget, policy, options.max_queued_texts, options.batch_wait),
            queue_full: options.queue_full,
            images: None,
        };
        engine.check_with_a_first_run(head)?;
        // The workers run batches of images side by side as they run texts: the vision graph's
        // session gets the threads the text graph's does.
        engine.images = match (&engine.info.folder.vision_file, &engine.backend) {
            (Some(file), Backend::Onnx(sessions)) => Some(ImageTower::open(
                &engine.info.folder.dir,
                file,
                &sessions.runtime,
                &plan,
                sessions.intra_threads,
                engine.info.model_dimension,
            )?),
            _ => None,
        };
        tracing::info!(provider = %engine.report.active_provider, vendor = %engine.report.gpu_vendor, "embedder ready");
        Ok((engine, tokens))
    }

    /// Runs one short text: finds the output width, checks it against the configs, and makes a
    /// graph that fails on real input (wrong vocabulary, wrong inputs) fail at load time. Then
    /// the Dense modules (`head`) join the engine, unless the graph's pooled output holds them.
    pub(crate) fn check_with_a_first_run(&mut self, head: DenseHead) -> Result<()> {
        let vocab = self.tokenizer.truncating().get_vocab_size(true);
        let probe_text = "nornir checks the model";
        let enc = self
            .tokenizer
            .truncating()
            .encode(probe_text, true)
            .map_err(|e| EmbedError::tokenizer_because(&self.info.folder.tokenizer_file, e))?;
        // The vocabulary's last id goes in too: a model with a smaller embedding table fails here.
        let mut ids = enc.get_ids().to_vec();
        let last = u32::try_from(vocab.saturating_sub(1)).unwrap_or(u32::MAX);
        ids.insert(ids.len().saturating_sub(1), last);
        let dim = self.run_batch(0, &[Row::text(&ids)], |_, _| {}).map_err(|e| match e {
            EmbedError::ForcedDeviceFailed { .. } => e,
            e => EmbedError::Model {
                dir: self.info.folder.dir.clone(),
                reason: format!(
                    "the model fails on a first test text; is tokenizer.json ({vocab} tokens) the model's own?"
                ),
                source: Some(e.into()),
            },
        })?;
        let (dim, dense_reason) = self.place_dense(head, dim)?;
        self.info.dense_reason = dense_reason;
        let folder = &self.info.folder;
        let expected = match folder.kind.kind.output_width() {
            OutputWidth::Hidden if !self.head.is_empty() => {
                self.head.out_features().map(|o| (o, "last Dense module's out_features"))
            }
            OutputWidth::Hidden if !folder.dense.is_empty() => {
                folder.dense.last().map(|d| (d.out_features, "last Dense module's out_features"))
            }
            OutputWidth::Hidden => folder.hidden_size.map(|h| (h, "hidden size")),
            OutputWidth::Vocabulary => folder.vocab_size.map(|v| (v, "vocabulary size")),
            OutputWidth::Labels => Some((folder.kind.labels.len(), "number of labels")),
            _ => None,
        };
        if let Some((want, what)) = expected
            && want != dim
        {
            return Err(EmbedError::model(
                &folder.dir,
                format!("the model's output has width {dim} but its config says {what} {want}"),
            ));
        }
        if let Some(d) = self.call_defaults.dimensions
            && d > dim
        {
            return Err(EmbedError::invalid(
                "dimensions",
                format!("{d} is wider than the model's {dim}-dimensional vectors; give at most {dim}"),
            ));
        }
        self.info.model_dimension = dim;
        self.info.dimension = self.call_defaults.dimensions.unwrap_or(dim);
        if self.info.folder.kind.kind != ModelKind::Embedder && self.call_defaults.chunking.is_some() {
            return Err(EmbedError::invalid(
                "chunking",
                format!(
                    "makes an embedder's dense document vectors, and this model is {}: truncate or refuse long texts",
                    self.info.folder.kind.kind.with_article()
                ),
            ));
        }
        // The embedder's own int8 ranges must fit the vectors its calls get by default.
        if let Some(r) = &self.call_defaults.ranges
            && self.info.folder.kind.kind == ModelKind::Embedder
        {
            r.check_width(self.info.dimension)?;
        }
        self.reset_stats();
        Ok(())
    }

    /// Where the Dense modules apply, given the width `raw` of the graph's first output: after
    /// nornir pools, or (a pooled output already as wide as their output and not their input:
    /// an export of the whole sentence-transformers model) nowhere. Returns the rows' width.
    fn place_dense(&mut self, head: DenseHead, raw: usize) -> Result<(usize, Option<String>)> {
        let (Some(takes), Some(gives)) = (head.in_features(), head.out_features()) else { return Ok((raw, None)) };
        let n = self.info.folder.dense.len();
        let output = &self.info.output;
        if self.io.pooled && raw == gives && raw != takes {
            return Ok((raw, Some(format!("already in the graph's pooled output {output:?} ({raw} wide)"))));
        }
        if self.io.pooled && takes == gives {
            return Err(EmbedError::model(
                &self.info.folder.dir,
                format!(
                    "the graph's output {output:?} is pooled and the Dense modules take and give {raw}, so nornir cannot \
                     tell whether the graph applied them: choose its token output with `output_name`"
                ),
            ));
        }
        if raw != takes {
            return Err(EmbedError::model(
                &self.info.folder.dir,
                format!("the pooled vectors are {raw} wide but the first Dense module takes in_features {takes}"),
            ));
        }
        self.head = head;
        Ok((gives, Some(format!("{n} Dense module(s) applied by nornir after pooling: {takes} -> {gives}"))))
    }
}

/// The folder read: its files, Dense head, prompt, tokenizer, and the token rules and sparse
/// head of a model that makes token vectors.
fn read_folder(dir: &Path, options: &EmbedderOptions) -> Result<FolderParts> {
    let folder = ModelFolder::open(dir, options.model_file.as_deref())?;
    let head = load_head(&folder.dir, &folder.dense)?;
    let prompt = choose_prompt(&folder, options)?;
    let tokenizer = ModelTokenizer::load(&folder, options.max_length)?;
    let token_rules = match &folder.multi_vector {
        Some(spec) => Some(TokenRules::resolve(&folder, spec, &tokenizer, folder.hidden_size)?),
        None => None,
    };
    let sparse_head = match (&folder.sparse_head, folder.hidden_size) {
        (Some(file), Some(hidden)) => Some(SparseHead::load(&folder, file, &tokenizer, hidden)?),
        (Some(file), None) => {
            return Err(EmbedError::model(&folder.dir, format!("{file} needs config.json's hidden_size")));
        }
        (None, _) => None,
    };
    let tokens = TokenModel { rules: token_rules.map(std::sync::Arc::new), sparse_head };
    Ok(FolderParts { folder, head, prompt, tokenizer, tokens })
}

/// ONNX Runtime loaded for the plan, its device list joined to the plan, and the first session
/// built on it with the workers and threads the plan implies.
fn build_first_session(folder: &ModelFolder, options: &EmbedderOptions) -> Result<FirstSession> {
    let cpu_only = folder.cpu_only();
    let first = plan_with(options.device, cpu_only.clone(), &[], &options.providers);
    if let Some(why) = &first.refusal {
        return Err(EmbedError::DeviceRefused { reason: why.clone() });
    }
    let runtime = load_runtime(&first, options.ort_library.as_deref())?;
    // ONNX Runtime's device list (with the plugins registered) joins the plan.
    let devices = list_devices(&runtime, &options.ep_libraries);
    let plan = plan_with(options.device, cpu_only, &devices.devices, &options.providers);
    let threads = options.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let default_workers =
        if plan.providers.iter().all(Planned::is_builtin_cpu) { default_cpu_workers(threads) } else { 1 };
    let cpu_workers = options.workers.unwrap_or(default_workers);
    let intra_threads = intra_threads(threads, cpu_workers);
    let resident = resident_bytes();
    // ONNX Runtime says what is wrong with a file that cannot be read.
    let graph = std::fs::read(&folder.model_file).unwrap_or_default();
    let (one_text_per_run, attention) = (one_text_per_run(&graph), attention(&graph));
    drop(graph);
    let cfg = SessionConfig { model: &folder.model_file, intra_threads, kernel_threads: threads, profile_to: None };
    let (session, report) = session::build(&runtime, &plan, &cfg)?;
    let session_growth = Mutex::new(growth_since(resident).into_iter().collect());
    let workers = if report.on_builtin_cpu() { cpu_workers } else { options.workers.unwrap_or(1) };
    Ok(FirstSession {
        runtime,
        session,
        report,
        workers,
        intra_threads,
        kernel_threads: threads,
        session_growth,
        one_text_per_run,
        attention,
        plan,
    })
}

/// The options that the folder's kind refuses: dimensions beyond dense vectors, and a decoder
/// embedder without a pooling rule.
fn check_kind_options(folder: &ModelFolder, options: &EmbedderOptions) -> Result<()> {
    if !matches!(folder.kind.kind, ModelKind::Embedder | ModelKind::MultiVector) && options.call.dimensions.is_some() {
        return Err(EmbedError::invalid(
            "dimensions",
            format!("cuts dense vectors; this model is a {}", folder.kind.kind),
        ));
    }
    if folder.decoder
        && folder.kind.kind == ModelKind::Embedder
        && options.pooling.is_none()
        && folder.pooling.is_none()
    {
        return Err(EmbedError::model(
            &folder.dir,
            "it is a decoder, whose embedder needs a pooling rule, and it has none: add 1_Pooling/config.json with \
             \"pooling_mode_lasttoken\": true (as Qwen3-Embedding ships it), or choose the pooling (--pooling last)",
        ));
    }
    Ok(())
}

/// What the graph (or a static model's table) tells the model's report.
pub(super) struct GraphFacts {
    pub(super) inputs: Vec<String>,
    /// The output is one vector per text.
    pub(super) pooled: bool,
    pub(super) output_reason: String,
    pub(super) one_text_per_run: Option<String>,
    /// How attention is computed, in words.
    pub(super) attention: String,
}

/// What the engine reports about the model, how its rows are pooled, and whether a call's
/// prompt tokens are pooled.
pub(super) fn model_info(
    folder: ModelFolder,
    prompt: PromptChoice,
    tokenizer: &ModelTokenizer,
    graph: GraphFacts,
    output: String,
    options: &EmbedderOptions,
) -> Result<(ModelInfo, RowSettings, bool)> {
    let (max_length, left_padding) = (tokenizer.max_length(), tokenizer.left_padding());
    let pooling = options.pooling.or(folder.kind.pooling).or(folder.pooling.map(|p| p.mode)).unwrap_or(Pooling::Mean);
    let include_prompt = folder.pooling.is_none_or(|p| p.include_prompt);
    let skip = if include_prompt || prompt.text.is_empty() {
        0
    } else {
        tokenizer
            .prompt_token_count(&prompt.text)
            .map_err(|e| EmbedError::tokenizer_because(&folder.tokenizer_file, e))?
    };
    let (normalize, normalize_reason) = match options.call.normalize {
        Some(n) => (n, "chosen by the caller".to_owned()),
        None => {
            let (n, why) = folder.normalize_default();
            (n, why.to_owned())
        }
    };
    let settings = RowSettings { pooling, left_padding };
    let info = ModelInfo {
        inputs: graph.inputs,
        output,
        output_is_pooled: graph.pooled,
        output_reason: graph.output_reason,
        dimension: 0,
        model_dimension: 0,
        max_length,
        max_length_reason: tokenizer.max_length_reason().to_owned(),
        pooling,
        pooling_skips_prompt_tokens: skip,
        normalize,
        normalize_reason,
        prompt,
        left_padding,
        one_text_per_run: graph.one_text_per_run,
        attention: graph.attention,
        dense_reason: None,
        folder,
    };
    Ok((info, settings, include_prompt))
}

//! What the model's graph takes and gives, read from the session at load time, and one padded
//! batch fed to it and pooled.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ort::session::Session;
use ort::value::{TensorElementType, TensorRef, ValueType};

use crate::error::{EmbedError, InferenceKind, Result};
use crate::kinds::pooling::pool_tokens;
use crate::report::values::ModelFolder;
use nornir_options::ModelKind;
use nornir_options::Pooling;

/// Outputs chosen by name before any other, in this order (sentence-transformers' and the
/// common exporters' names).
pub(crate) const OUTPUT_NAMES: [&str; 5] =
    ["sentence_embedding", "token_embeddings", "last_hidden_state", "text_embeds", "embeddings"];

/// The floating-point type of the chosen output; half types are widened to f32 before pooling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutputType {
    F32,
    F16,
    Bf16,
}

/// A `task_id` input (jina-embeddings-v3): an int64 scalar or `[1]`, fed the task's index.
#[derive(Debug, Clone)]
pub(crate) struct TaskInput {
    pub(crate) name: String,
    pub(crate) scalar: bool,
    pub(crate) value: i64,
}

/// A decoder export's cache input (`past_key_values.N.key` / `.value`, as onnx-community's and
/// optimum's exports have): an embedder needs no cache, so each is fed empty, `[batch, heads, 0,
/// head width]`.
#[derive(Debug, Clone)]
pub(crate) struct PastInput {
    pub(crate) name: String,
    pub(crate) heads: usize,
    pub(crate) width: usize,
    pub(crate) half: bool,
}

/// What the model's graph expects, read from the session at load time.
#[derive(Debug, Clone)]
pub(crate) struct GraphIo {
    pub(crate) ids: String,
    pub(crate) mask: Option<String>,
    pub(crate) type_ids: Option<String>,
    pub(crate) position_ids: Option<String>,
    pub(crate) task: Option<TaskInput>,
    /// Cache inputs fed empty.
    pub(crate) past: Vec<PastInput>,
    /// optimum's merged decoders' `use_cache_branch`, fed false.
    pub(crate) use_cache_branch: Option<String>,
    int32: bool,
    pub(crate) output: usize,
    pub(crate) output_type: OutputType,
    /// The output is already one vector per text (`sentence_embedding`).
    pub(crate) pooled: bool,
    /// Why this output was chosen, for model info and the doctor.
    pub(crate) output_reason: String,
}

fn float_output(ty: &ValueType) -> Option<(OutputType, usize)> {
    match ty {
        ValueType::Tensor { ty, shape, .. } if (2..=3).contains(&shape.len()) => match ty {
            TensorElementType::Float32 => Some((OutputType::F32, shape.len())),
            TensorElementType::Float16 => Some((OutputType::F16, shape.len())),
            TensorElementType::Bfloat16 => Some((OutputType::Bf16, shape.len())),
            _ => None,
        },
        _ => None,
    }
}

/// Reads the graph's inputs and outputs and checks them against what a text embedder needs.
/// `output_name` overrides the choice of output.
pub(crate) fn graph_io(session: &Session, folder: &ModelFolder, output_name: Option<&str>) -> Result<GraphIo> {
    let err = |reason: String| EmbedError::model(&folder.dir, reason);
    let (mut ids, mut mask, mut type_ids, mut position_ids) = (None, None, None, None);
    let mut task = None;
    let mut int32 = None;
    let mut past = Vec::new();
    let mut use_cache_branch = None;
    for input in session.inputs() {
        let name = input.name();
        if name.starts_with("past_key_values") || name.starts_with("past_key") || name.starts_with("past_value") {
            past.push(past_input(name, input.dtype()).map_err(|why| {
                err(format!("its cache input {name:?} cannot be fed empty ({why}); export the model without a KV cache, or with its heads and head width fixed"))
            })?);
            continue;
        }
        if name == "use_cache_branch" {
            use_cache_branch = Some(name.to_owned());
            continue;
        }
        let (ty, rank) = match input.dtype() {
            ValueType::Tensor { ty, shape, .. } => (*ty, shape.len()),
            other => {
                return Err(err(format!(
                    "input {name:?} is {other}, not a tensor; this is not a text-embedding model"
                )));
            }
        };
        if name == "task_id" {
            if ty != TensorElementType::Int64 || rank > 1 {
                return Err(err(format!(
                    "input \"task_id\" is {}; nornir feeds a task index as an int64 scalar or [1]",
                    input.dtype()
                )));
            }
            task = Some(TaskInput { name: name.to_owned(), scalar: rank == 0, value: 0 });
            continue;
        }
        let is32 = match ty {
            TensorElementType::Int64 => false,
            TensorElementType::Int32 => true,
            other => {
                return Err(err(format!(
                    "input {name:?} takes {other:?}; a text model takes int64 or int32 token ids (is this an image or audio model?)"
                )));
            }
        };
        let slot = match name {
            "input_ids" => &mut ids,
            "attention_mask" => &mut mask,
            "token_type_ids" => &mut type_ids,
            "position_ids" => &mut position_ids,
            other => {
                return Err(err(format!(
                    "model input {other:?} ({}) is not one nornir can fill; it feeds input_ids, attention_mask, \
                     token_type_ids, position_ids and task_id",
                    input.dtype()
                )));
            }
        };
        if int32.is_some_and(|v| v != is32) {
            return Err(err("inputs mix int32 and int64; nornir feeds one integer type".to_owned()));
        }
        int32 = Some(is32);
        *slot = Some(name.to_owned());
    }
    let ids =
        ids.ok_or_else(|| err("the model has no input_ids input; this is not a text-embedding model".to_owned()))?;
    let outputs = session.outputs();
    let describe = |i: usize| format!("{:?} {}", outputs[i].name(), outputs[i].dtype());
    let listing = || (0..outputs.len()).map(describe).collect::<Vec<_>>().join(", ");
    if outputs.is_empty() {
        return Err(err("the model has no outputs".to_owned()));
    }
    let usable = |i: usize| float_output(outputs[i].dtype());
    let (output, output_reason) = if let Some(wanted) = output_name {
        let i = outputs.iter().position(|o| o.name() == wanted).ok_or_else(|| {
            EmbedError::invalid(
                "output_name",
                format!("the model has no output {wanted:?}; its outputs are {}", listing()),
            )
        })?;
        if usable(i).is_none() {
            return Err(EmbedError::invalid(
                "output_name",
                format!(
                    "the model's output {wanted:?} is {}; nornir needs a floating-point [batch, tokens, width] or [batch, width] output",
                    outputs[i].dtype()
                ),
            ));
        }
        (i, "chosen by the caller".to_owned())
    } else if let Some(i) = (folder.kind.kind != ModelKind::Embedder)
        .then(|| (0..outputs.len()).find(|&i| outputs[i].name() == "logits" && usable(i).is_some()))
        .flatten()
    {
        (i, format!("named logits: the {} head's output", folder.kind.kind))
    } else if let Some((i, name)) = OUTPUT_NAMES
        .iter()
        .find_map(|n| (0..outputs.len()).find(|&i| outputs[i].name() == *n && usable(i).is_some()).map(|i| (i, n)))
    {
        (i, format!("named {name}"))
    } else if let Some(i) = (0..outputs.len()).find(|&i| usable(i).is_some()) {
        let skipped: Vec<String> = (0..i).map(describe).collect();
        let reason = if skipped.is_empty() {
            "the first output, floating-point".to_owned()
        } else {
            format!("the first floating-point output of rank 2 or 3 (passed over: {})", skipped.join(", "))
        };
        (i, reason)
    } else {
        return Err(err(format!(
            "no output is floating-point [batch, tokens, width] or [batch, width] (its outputs are {}); \
             nornir reads float32, float16 or bfloat16 vectors",
            listing()
        )));
    };
    let (output_type, rank) = usable(output).unwrap_or((OutputType::F32, 3));
    Ok(GraphIo {
        ids,
        mask,
        type_ids,
        position_ids,
        task,
        past,
        use_cache_branch,
        int32: int32.unwrap_or(false),
        output,
        output_type,
        pooled: rank == 2,
        output_reason,
    })
}

/// A cache input's heads and head width, which must be fixed: `[batch, heads, past, width]` of
/// float32 or float16.
fn past_input(name: &str, ty: &ValueType) -> std::result::Result<PastInput, String> {
    let ValueType::Tensor { ty, shape, .. } = ty else { return Err(format!("it is {ty}, not a tensor")) };
    let half = match ty {
        TensorElementType::Float32 => false,
        TensorElementType::Float16 => true,
        other => return Err(format!("it holds {other:?}, not float32 or float16")),
    };
    let dims: Vec<i64> = shape.iter().copied().collect();
    match dims[..] {
        [_, heads, _, width] if heads > 0 && width > 0 => {
            Ok(PastInput { name: name.to_owned(), heads: heads as usize, width: width as usize, half })
        }
        _ => Err(format!("its shape is {dims:?}, not [batch, heads, past, head width] with fixed heads and width")),
    }
}

/// How one batch is laid out and pooled: the same for every batch of an embedder. What a call
/// chooses (normalisation, dimensions) is applied to its own rows afterwards.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowSettings {
    pub(crate) pooling: Pooling,
    /// Pad on the left (the tokenizer's padding side, as decoder models have it).
    pub(crate) left_padding: bool,
}

/// One text of a batch: its token ids, and how many tokens at its start (a prompt, when the
/// pooling config says `include_prompt: false`) the modes that read every token leave out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row<'a> {
    pub(crate) ids: &'a [u32],
    pub(crate) skip: usize,
    /// Token ranges to pool into a vector each (late chunking); empty: the whole text.
    pub(crate) spans: &'a [(usize, usize)],
    /// Token type ids (1 for a pair's second text); empty: all 0.
    pub(crate) types: &'a [u32],
    /// The tokens every token may attend to: the first this many (a ColBERT query's expansion
    /// tokens after them are read but not attended to); `ids.len()` for a whole text.
    pub(crate) attend: usize,
    /// Each span is one token, handed over as the graph gives it (unpooled, no Dense: TEI's).
    pub(crate) raw: bool,
}

impl<'a> Row<'a> {
    /// A whole text, every token pooled.
    pub(crate) fn text(ids: &'a [u32]) -> Self {
        Self { ids, skip: 0, spans: &[], types: &[], attend: ids.len(), raw: false }
    }
}

/// A batch's ids, attention mask, token type ids and position ids, padded to `l`, in the graph's
/// integer type.
pub(crate) struct PaddedInputs<T> {
    ids: Vec<T>,
    mask: Vec<T>,
    types: Vec<T>,
    positions: Vec<T>,
}

impl<
    T: ort::value::PrimitiveTensorElementType
        + From<u16>
        + TryFrom<u32>
        + TryFrom<usize>
        + Copy
        + std::fmt::Debug
        + 'static,
> PaddedInputs<T>
{
    fn new(rows: &[Row<'_>], l: usize, left: bool, with_positions: bool) -> Self {
        let zero = T::from(0u16);
        let one = T::from(1u16);
        let mut ids = vec![zero; rows.len() * l];
        let mut mask = vec![zero; rows.len() * l];
        let mut types = vec![zero; rows.len() * l];
        // Padding positions get 1, as transformers' `position_ids` from the mask do.
        let mut positions = if with_positions { vec![one; rows.len() * l] } else { Vec::new() };
        for (k, row) in rows.iter().enumerate() {
            let r = row.ids;
            let start = k * l + if left { l - r.len() } else { 0 };
            for (j, &t) in row.types.iter().enumerate() {
                types[start + j] = T::try_from(t).unwrap_or(zero);
            }
            for (j, &t) in r.iter().enumerate() {
                // Token ids come from the tokenizer's vocabulary and j from the length limit, far below i32::MAX.
                ids[start + j] = T::try_from(t).unwrap_or(zero);
                if j < row.attend {
                    mask[start + j] = one;
                }
                if with_positions {
                    positions[start + j] = T::try_from(j).unwrap_or(zero);
                }
            }
        }
        Self { ids, mask, types, positions }
    }

    /// The inputs the graph declares, viewing this batch's buffers without copying them.
    fn feed<'a>(
        &'a self,
        io: &'a GraphIo,
        shape: [usize; 2],
    ) -> ort::Result<Vec<(String, ort::session::SessionInputValue<'a>)>> {
        let mut feed = Vec::with_capacity(5);
        feed.push((io.ids.clone(), TensorRef::from_array_view((shape, self.ids.as_slice()))?.into()));
        for (name, values) in [(&io.mask, &self.mask), (&io.type_ids, &self.types), (&io.position_ids, &self.positions)]
        {
            if let Some(name) = name {
                feed.push((name.clone(), TensorRef::from_array_view((shape, values.as_slice()))?.into()));
            }
        }
        for p in &io.past {
            let shape = [shape[0], p.heads, 0, p.width];
            let empty: ort::session::SessionInputValue<'a> = if p.half {
                TensorRef::from_array_view((shape, &[] as &[half::f16]))?.into()
            } else {
                TensorRef::from_array_view((shape, &[] as &[f32]))?.into()
            };
            feed.push((p.name.clone(), empty));
        }
        if let Some(name) = &io.use_cache_branch {
            feed.push((name.clone(), TensorRef::from_array_view(([1usize], &[false][..]))?.into()));
        }
        if let Some(task) = &io.task {
            let value = std::slice::from_ref(&task.value);
            let tensor = if task.scalar {
                TensorRef::from_array_view(((), value))?
            } else {
                TensorRef::from_array_view(([1usize], value))?
            };
            feed.push((task.name.clone(), tensor.into()));
        }
        Ok(feed)
    }
}

/// The chosen output's values as f32: borrowed when the graph gives f32, widened otherwise.
fn output_values<'a>(value: &'a ort::value::DynValue, ty: OutputType) -> ort::Result<(Vec<i64>, Cow<'a, [f32]>)> {
    Ok(match ty {
        OutputType::F32 => {
            let (shape, v) = value.try_extract_tensor::<f32>()?;
            (shape.to_vec(), Cow::Borrowed(v))
        }
        OutputType::F16 => {
            let (shape, v) = value.try_extract_tensor::<half::f16>()?;
            (shape.to_vec(), Cow::Owned(v.iter().map(|x| x.to_f32()).collect()))
        }
        OutputType::Bf16 => {
            let (shape, v) = value.try_extract_tensor::<half::bf16>()?;
            (shape.to_vec(), Cow::Owned(v.iter().map(|x| x.to_f32()).collect()))
        }
    })
}

/// Runs one padded batch and hands each text's pooled vector (or one per span, a raw row's
/// unpooled), at full width, not normalised, to `emit(k, vector)`, in order; returns the width.
pub(crate) fn run_and_pool(
    session: &Session,
    io: &GraphIo,
    settings: RowSettings,
    rows: &[Row<'_>],
    ort_nanos: &AtomicU64,
    mut emit: impl FnMut(usize, &[f32]),
) -> Result<usize> {
    let mut v = Vec::new();
    forward(session, io, settings, rows, ort_nanos, |k, out, width| {
        let row = &rows[k];
        v.resize(width, 0.0);
        if io.pooled {
            emit(k, out);
        } else if row.spans.is_empty() {
            pool_tokens(out, row.ids.len(), width, settings.pooling, row.skip, &mut v);
            emit(k, &v);
        } else if row.raw {
            row.spans.iter().for_each(|&(from, to)| emit(k, &out[from * width..to * width]));
        } else {
            for &(from, to) in row.spans {
                pool_tokens(&out[from * width..to * width], to - from, width, settings.pooling, 0, &mut v);
                emit(k, &v);
            }
        }
    })
}

/// Runs one padded batch and hands each text's output to `visit(k, values, width)`: its token
/// vectors (`len x width`, padding left out), or its one vector when the graph pools. Returns
/// the width.
pub(crate) fn forward(
    session: &Session,
    io: &GraphIo,
    settings: RowSettings,
    rows: &[Row<'_>],
    ort_nanos: &AtomicU64,
    mut visit: impl FnMut(usize, &[f32], usize),
) -> Result<usize> {
    let b = rows.len();
    let l = rows.iter().map(|r| r.ids.len()).max().unwrap_or(0).max(1);
    let fail = |e: ort::Error| EmbedError::inference_because(InferenceKind::Runtime, "", e);
    let (wide, narrow);
    let positions = io.position_ids.is_some();
    let feed = if io.int32 {
        narrow = PaddedInputs::<i32>::new(rows, l, settings.left_padding, positions);
        narrow.feed(io, [b, l]).map_err(fail)?
    } else {
        wide = PaddedInputs::<i64>::new(rows, l, settings.left_padding, positions);
        wide.feed(io, [b, l]).map_err(fail)?
    };
    let started = Instant::now();
    let output = crate::forward::shared_run::run(session, &feed, io.output).map_err(fail)?;
    ort_nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    let (shape, values) = output_values(&output, io.output_type).map_err(fail)?;
    let dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    let width = *dims.last().unwrap_or(&0);
    let (expect_rank, expect) =
        if io.pooled { (2, format!("[{b}, width]")) } else { (3, format!("[{b}, {l}, width]")) };
    if dims.len() != expect_rank || dims[0] != b || (!io.pooled && dims[1] != l) || width == 0 {
        return Err(EmbedError::inference(
            InferenceKind::OutputShape,
            format!("the model returned shape {dims:?}; expected {expect}"),
        ));
    }
    for (k, r) in rows.iter().enumerate() {
        if io.pooled {
            visit(k, &values[k * width..(k + 1) * width], width);
        } else {
            let len = r.ids.len();
            let first = k * l + if settings.left_padding { l - len } else { 0 };
            visit(k, &values[first * width..(first + len) * width], width);
        }
    }
    Ok(width)
}

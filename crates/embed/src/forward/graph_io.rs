//! What the model's graph takes and gives, read from the session at load time: its inputs, the
//! output nornir reads and why.

use ort::session::Session;
use ort::value::{TensorElementType, ValueType};

use crate::error::{EmbedError, Result};
use crate::values::ModelFolder;
use nornir_options::ModelKind;

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
    pub(crate) int32: bool,
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
    let (output, output_reason) = choose_output(session, folder, output_name)?;
    let (output_type, rank) = float_output(session.outputs()[output].dtype()).unwrap_or((OutputType::F32, 3));
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

/// The output nornir reads, and why: the caller's choice, a head's `logits`, a known name, else
/// the first floating-point output of rank 2 or 3.
fn choose_output(session: &Session, folder: &ModelFolder, output_name: Option<&str>) -> Result<(usize, String)> {
    let err = |reason: String| EmbedError::model(&folder.dir, reason);
    let outputs = session.outputs();
    let describe = |i: usize| format!("{:?} {}", outputs[i].name(), outputs[i].dtype());
    let listing = || (0..outputs.len()).map(describe).collect::<Vec<_>>().join(", ");
    if outputs.is_empty() {
        return Err(err("the model has no outputs".to_owned()));
    }
    let usable = |i: usize| float_output(outputs[i].dtype());
    let chosen = if let Some(wanted) = output_name {
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
    Ok(chosen)
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

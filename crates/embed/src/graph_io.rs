//! What the model's graph takes and gives, read from the session at load time, and one padded
//! batch fed to it and pooled.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ort::session::Session;
use ort::value::{TensorElementType, TensorRef, ValueType};

use crate::error::{EmbedError, Result};
use crate::model::ModelFolder;
use crate::pooling::{Pooling, normalize, pool_tokens};

/// What the model's graph expects, read from the session at load time.
#[derive(Debug, Clone)]
pub(crate) struct GraphIo {
    pub(crate) ids: String,
    pub(crate) mask: Option<String>,
    pub(crate) type_ids: Option<String>,
    int32: bool,
    pub(crate) output: usize,
    /// The output is already one vector per text (`sentence_embedding`).
    pub(crate) pooled: bool,
}

/// Reads the graph's inputs and outputs and checks them against what a text embedder needs.
pub(crate) fn graph_io(session: &Session, folder: &ModelFolder) -> Result<GraphIo> {
    let err = |reason: String| EmbedError::Model { dir: folder.dir.clone(), reason };
    let mut ids = None;
    let mut mask = None;
    let mut type_ids = None;
    let mut int32 = None;
    for input in session.inputs() {
        let name = input.name();
        let ty = match input.dtype() {
            ValueType::Tensor { ty, .. } => *ty,
            other => {
                return Err(err(format!(
                    "input {name:?} is {other}, not a tensor; this is not a text-embedding model"
                )));
            }
        };
        let is32 = match ty {
            TensorElementType::Int64 => false,
            TensorElementType::Int32 => true,
            other => {
                return Err(err(format!(
                    "input {name:?} takes {other:?}; a text model takes int64 or int32 token ids (is this an image or audio model?)"
                )));
            }
        };
        if int32.is_some_and(|v| v != is32) {
            return Err(err("inputs mix int32 and int64; nornir feeds one integer type".to_owned()));
        }
        int32 = Some(is32);
        match name {
            "input_ids" => ids = Some(name.to_owned()),
            "attention_mask" => mask = Some(name.to_owned()),
            "token_type_ids" => type_ids = Some(name.to_owned()),
            other => {
                return Err(err(format!(
                    "unexpected model input {other:?}; nornir feeds input_ids, attention_mask and token_type_ids"
                )));
            }
        }
    }
    let ids =
        ids.ok_or_else(|| err("the model has no input_ids input; this is not a text-embedding model".to_owned()))?;
    let outputs = session.outputs();
    if outputs.is_empty() {
        return Err(err("the model has no outputs".to_owned()));
    }
    let rank = |i: usize| match outputs[i].dtype() {
        ValueType::Tensor { ty: TensorElementType::Float32, shape, .. } => Some(shape.len()),
        _ => None,
    };
    let (output, pooled) = match outputs.iter().position(|o| o.name() == "sentence_embedding") {
        Some(i) if rank(i) == Some(2) => (i, true),
        _ => match rank(0) {
            Some(3) => (0, false),
            Some(2) => (0, true),
            _ => {
                return Err(err(format!(
                    "output {:?} is {}; nornir needs float32 [batch, tokens, width] or [batch, width]",
                    outputs[0].name(),
                    outputs[0].dtype()
                )));
            }
        },
    };
    Ok(GraphIo { ids, mask, type_ids, int32: int32.unwrap_or(false), output, pooled })
}

/// A batch's ids, attention mask and token type ids, padded to `l`, in the graph's integer type.
pub(crate) struct PaddedInputs<T> {
    ids: Vec<T>,
    mask: Vec<T>,
    types: Vec<T>,
}

impl<T: ort::value::PrimitiveTensorElementType + From<u16> + TryFrom<u32> + Copy + std::fmt::Debug + 'static>
    PaddedInputs<T>
{
    fn new(rows: &[&[u32]], l: usize) -> Self {
        let zero = T::from(0u16);
        let mut ids = vec![zero; rows.len() * l];
        let mut mask = vec![zero; rows.len() * l];
        for (k, r) in rows.iter().enumerate() {
            for (j, &t) in r.iter().enumerate() {
                // Token ids come from the tokenizer's vocabulary, far below i32::MAX.
                ids[k * l + j] = T::try_from(t).unwrap_or(zero);
                mask[k * l + j] = T::from(1u16);
            }
        }
        Self { ids, mask, types: vec![zero; rows.len() * l] }
    }

    /// The inputs the graph declares, viewing this batch's buffers without copying them.
    fn feed(&self, io: &GraphIo, shape: [usize; 2]) -> ort::Result<Vec<(String, ort::session::SessionInputValue<'_>)>> {
        let mut feed = Vec::with_capacity(3);
        feed.push((io.ids.clone(), TensorRef::from_array_view((shape, self.ids.as_slice()))?.into()));
        if let Some(m) = &io.mask {
            feed.push((m.clone(), TensorRef::from_array_view((shape, self.mask.as_slice()))?.into()));
        }
        if let Some(t) = &io.type_ids {
            feed.push((t.clone(), TensorRef::from_array_view((shape, self.types.as_slice()))?.into()));
        }
        Ok(feed)
    }
}

/// Runs one padded batch and hands each text's finished vector to `emit(k, vector)`.
/// Returns the vector width.
pub(crate) fn run_batch(
    session: &mut Session,
    io: &GraphIo,
    pooling: Pooling,
    normalize_rows: bool,
    rows: &[&[u32]],
    ort_nanos: &AtomicU64,
    mut emit: impl FnMut(usize, &[f32]),
) -> Result<usize> {
    let b = rows.len();
    let l = rows.iter().map(|r| r.len()).max().unwrap_or(0).max(1);
    let fail = |e: ort::Error| EmbedError::Inference(e.to_string());
    let (wide, narrow);
    let feed = if io.int32 {
        narrow = PaddedInputs::<i32>::new(rows, l);
        narrow.feed(io, [b, l]).map_err(fail)?
    } else {
        wide = PaddedInputs::<i64>::new(rows, l);
        wide.feed(io, [b, l]).map_err(fail)?
    };
    let started = Instant::now();
    let outputs = session.run(feed).map_err(fail)?;
    ort_nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    let (shape, values) = outputs[io.output].try_extract_tensor::<f32>().map_err(fail)?;
    let dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    let dim = *dims.last().unwrap_or(&0);
    let expect_rank = if io.pooled { 2 } else { 3 };
    if dims.len() != expect_rank || dims[0] != b || dim == 0 {
        return Err(EmbedError::Inference(format!(
            "the model returned shape {dims:?}; expected {expect_rank} dimensions starting with {b}"
        )));
    }
    let mut v = vec![0f32; dim];
    for (k, r) in rows.iter().enumerate() {
        if io.pooled {
            v.copy_from_slice(&values[k * dim..(k + 1) * dim]);
        } else {
            let seq = dims[1];
            let hidden = &values[k * seq * dim..(k + 1) * seq * dim];
            pool_tokens(hidden, r.len().min(seq), dim, pooling, &mut v);
        }
        if normalize_rows {
            normalize(&mut v);
        }
        emit(k, &v);
    }
    Ok(dim)
}

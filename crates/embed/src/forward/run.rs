//! One padded batch fed to the graph, run, and its output pooled into rows.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ort::session::Session;
use ort::value::TensorRef;

use crate::error::{EmbedError, InferenceKind, Result};
use crate::forward::graph_io::{GraphIo, OutputType};
use crate::math::pooling::pool_tokens;
use nornir_options::Pooling;

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

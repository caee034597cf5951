//! nornir's own CPU kernels (the `nornir-kernels` crate) as ONNX Runtime operators of the
//! `ai.nornir` domain. A converted graph calls them as model-local functions whose bodies are
//! standard operators: ONNX Runtime runs the kernel where it is registered (sessions on its CPU
//! provider, see `session.rs`) and the function's body anywhere else (a GPU provider, another
//! runtime), so a model folder stays portable.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use nornir_kernels::AttentionInputs;
use ort::operator::{
    BoxedKernel, ComputeContext, KernelContext, Operator, OperatorDomain, OperatorInput, OperatorOutput,
    ShapeInferenceContext,
};
use ort::value::TensorElementType;

/// The domain converted graphs name nornir's operators by.
pub(crate) const DOMAIN: &str = "ai.nornir";

/// The operators of [`DOMAIN`], sharing `threads` threads (the embedder's) with the runs beside
/// theirs, each of which computes on up to `intra_threads` (its session's).
pub(crate) fn operators(threads: usize, intra_threads: usize) -> ort::Result<OperatorDomain> {
    let share = Share { threads, intra_threads };
    OperatorDomain::new(DOMAIN)?
        .add(TiledAttention { share, bias: PositionBias::Alibi })?
        .add(TiledAttention { share, bias: PositionBias::None })?
        .add(TiledAttention { share, bias: PositionBias::Window })
}

/// Commits a session, one at a time until one has succeeded. ONNX Runtime adds a custom domain
/// to ONNX's process-wide table of domains with a check and then an add, without a lock, so two
/// sessions built at once with nornir's domain can both add it, and the second then fails ("the
/// domain is already exist"); any session build reads that table too. Once one build has added
/// the domain, the table only is read, and builds run side by side.
pub(crate) fn committing<T>(commit: impl FnOnce() -> ort::Result<T>) -> ort::Result<T> {
    static REGISTERED: AtomicBool = AtomicBool::new(false);
    static FIRST: Mutex<()> = Mutex::new(());
    if REGISTERED.load(Ordering::Acquire) {
        return commit();
    }
    let _one_at_a_time = FIRST.lock().unwrap_or_else(PoisonError::into_inner);
    let done = commit();
    if done.is_ok() {
        REGISTERED.store(true, Ordering::Release);
    }
    done
}

/// Session runs in flight in this process (`forward/shared_run.rs` counts them).
static RUNS_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// One session run in flight, while it lives.
pub(crate) struct InFlight(());

impl InFlight {
    pub(crate) fn start() -> InFlight {
        RUNS_IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
        InFlight(())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        RUNS_IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The threads nornir's kernels may use, and what each other run in flight takes of them.
#[derive(Clone, Copy)]
struct Share {
    threads: usize,
    intra_threads: usize,
}

impl Share {
    /// The threads a kernel call takes: what the other runs in flight leave, each counted at its
    /// session's intra-op threads, and at least one. A lone long text then has every core in its
    /// attention, as runs side by side have their share.
    fn free(self) -> usize {
        let others = RUNS_IN_FLIGHT.load(Ordering::Relaxed).saturating_sub(1);
        free_threads(self.threads, self.intra_threads, others)
    }
}

fn free_threads(threads: usize, intra_threads: usize, others: usize) -> usize {
    threads.saturating_sub(others.saturating_mul(intra_threads.max(1))).max(1)
}

/// What an attention operator adds to its scores besides the padding.
#[derive(Clone, Copy, PartialEq)]
enum PositionBias {
    /// `AlibiAttention` (JinaBERT; the converter's `network/alibi.rs`): inputs `query`, `key`,
    /// `value`, `attention_mask`, `negative_slopes`, optional `qkv_bias`.
    Alibi,
    /// `Attention` (every other encoder's global layers; `network/padded.rs`): inputs `query`,
    /// `key`, `value`, `attention_mask`, optional `qkv_bias`, and the `num_heads` attribute.
    None,
    /// `WindowAttention` (ModernBERT's local layers; `network/window.rs`): `Attention`'s inputs
    /// and attributes, and `window`: the keys within it of the query on either side.
    Window,
}

/// What one kernel of an attention operator computes, from its attributes.
#[derive(Clone, Copy)]
enum Call {
    /// ALiBi's: the slopes input gives the heads.
    Alibi,
    Plain {
        heads: usize,
    },
    Window {
        heads: usize,
        window: usize,
    },
}

/// nornir's tiled attention kernel (`nornir_kernels`) as one of the [`DOMAIN`] operators.
struct TiledAttention {
    share: Share,
    bias: PositionBias,
}

impl Operator for TiledAttention {
    type Kernel<'attr> = BoxedKernel<'attr>;

    fn name(&self) -> &str {
        match self.bias {
            PositionBias::Alibi => "AlibiAttention",
            PositionBias::None => "Attention",
            PositionBias::Window => "WindowAttention",
        }
    }

    fn inputs(&self) -> impl IntoIterator<Item = OperatorInput> {
        let f32 = || OperatorInput::required(TensorElementType::Float32);
        let mut inputs = vec![f32(), f32(), f32(), OperatorInput::required(TensorElementType::Int64)];
        if self.bias == PositionBias::Alibi {
            inputs.push(f32());
        }
        inputs.push(OperatorInput::optional(TensorElementType::Float32));
        inputs
    }

    fn outputs(&self) -> impl IntoIterator<Item = OperatorOutput> {
        [OperatorOutput::required(TensorElementType::Float32)]
    }

    /// The output is the query's type and shape: without this, ONNX Runtime knows nothing of the
    /// shapes after the node (a graph output added after it, as the quantizer's calibration adds
    /// one, would have no rank).
    fn infer_shape(&self, ctx: &mut ShapeInferenceContext) -> ort::Result<()> {
        match ctx.inputs().into_iter().next() {
            Some(query) => ctx.set_output(0, &query),
            None => Ok(()),
        }
    }

    fn create_kernel<'attr>(&self, info: &KernelContext<'attr>) -> ort::Result<Self::Kernel<'attr>> {
        let share = self.share;
        let count = |name: &str| -> ort::Result<usize> {
            let n = info.get::<i64>(name).ok_or_else(|| refused(format!("no {name} attribute")))?;
            usize::try_from(n).map_err(|_| refused(format!("{name} is {n}")))
        };
        let call = match self.bias {
            PositionBias::Alibi => Call::Alibi,
            PositionBias::None => Call::Plain { heads: count("num_heads")? },
            PositionBias::Window => Call::Window { heads: count("num_heads")?, window: count("window")? },
        };
        Ok(Box::new(move |ctx: &ComputeContext| tiled_attention(ctx, call, share.free())))
    }
}

fn refused(message: String) -> ort::Error {
    ort::Error::new(format!("nornir attention: {message}"))
}

/// One call of the kernel `call` says.
fn tiled_attention(ctx: &ComputeContext, call: Call, threads: usize) -> ort::Result<()> {
    let input = |i: usize| ctx.input(i)?.ok_or_else(|| refused(format!("input {i} is missing")));
    let (query, key, value, mask) = (input(0)?, input(1)?, input(2)?, input(3)?);
    // ALiBi's slopes come before the optional qkv_bias.
    let bias_at = if matches!(call, Call::Alibi) { 5 } else { 4 };
    let bias = if ctx.num_inputs()? > bias_at { ctx.input(bias_at)? } else { None };
    let (shape, query) = query.try_extract_tensor::<f32>()?;
    let dims: Vec<i64> = shape.to_vec();
    let [batch, sequence, _] = dims[..] else {
        return Err(refused(format!("the query is {dims:?}, not [batch, sequence, hidden]")));
    };
    let (mask_shape, attention_mask) = mask.try_extract_tensor::<i64>()?;
    if mask_shape[..] != [batch, sequence] {
        return Err(refused(format!("the mask is {:?}, not [{batch}, {sequence}]", &mask_shape[..])));
    }
    let inputs = AttentionInputs {
        query,
        key: key.try_extract_tensor::<f32>()?.1,
        value: value.try_extract_tensor::<f32>()?.1,
        attention_mask,
        qkv_bias: match &bias {
            Some(b) => Some(b.try_extract_tensor::<f32>()?.1),
            None => None,
        },
    };
    let mut output = ctx.output(0, dims.clone())?.ok_or_else(|| refused("no output".to_owned()))?;
    let (_, output) = output.try_extract_tensor_mut::<f32>()?;
    if batch == 0 || sequence == 0 {
        return Ok(());
    }
    let size = |d: i64| usize::try_from(d).map_err(|_| refused(format!("a negative size {d}")));
    let (batch, sequence) = (size(batch)?, size(sequence)?);
    let done = match call {
        Call::Plain { heads } => nornir_kernels::attention(batch, sequence, heads, &inputs, output, threads),
        Call::Window { heads, window } => {
            nornir_kernels::window_attention(batch, sequence, [heads, window], &inputs, output, threads)
        }
        Call::Alibi => {
            let slopes = input(4)?;
            let negative_slopes = slopes.try_extract_tensor::<f32>()?.1;
            let with = nornir_kernels::AlibiInputs { attention: inputs, negative_slopes };
            nornir_kernels::alibi_attention(batch, sequence, &with, output, threads)
        }
    };
    done.map_err(|e| ort::Error::new(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::free_threads;

    #[test]
    fn a_kernel_call_takes_the_threads_the_other_runs_leave() {
        // 2 threads, two workers of one intra-op thread each (the default on 2 cores).
        assert_eq!(free_threads(2, 1, 0), 2);
        assert_eq!(free_threads(2, 1, 1), 1);
        // 16 threads, 8 workers of 9 intra-op threads: one other run leaves 7, more leave 1.
        assert_eq!((free_threads(16, 9, 0), free_threads(16, 9, 1), free_threads(16, 9, 5)), (16, 7, 1));
        assert_eq!(free_threads(1, 1, 0), 1);
        assert_eq!(free_threads(0, 0, usize::MAX), 1);
    }
}

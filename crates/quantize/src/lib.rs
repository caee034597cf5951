//! `nornir-quantize`: int8 for the CPU. Rewrites an ONNX model so that every `MatMul` and `Gemm`
//! whose weight is a constant (a float32 initializer, or int8 initializers that the graph
//! dequantizes through `Cast` and `Mul` or `DequantizeLinear`) runs in int8: the weight stored as
//! int8 with a scale per output column (or one per tensor), the activations quantized on the fly.
//! `Gather` from an int8 table that the graph dequantizes gathers the int8 rows first and
//! dequantizes only those.
//!
//! Activations get one scale per token by default ([`Activations::PerToken`]): each row of a
//! MatMul's input is scaled by its own largest magnitude, so a text's vector is the same alone or
//! in any batch. ONNX Runtime's fused `com.microsoft.DynamicQuantizeMatMul` takes one scale for
//! the whole input, padding and neighbouring texts included ([`Activations::PerTensor`]).
//!
//! It is a graph-to-graph rewrite on the ONNX protobuf (rust-protobuf, with the fields it does not
//! touch kept as they were), and nothing else: it knows nothing of ONNX Runtime sessions, runs
//! nothing, and does no I/O. What the rewrite costs in quality is measured above it, by the
//! command that runs both models (`nornir vector quantize`).

#![forbid(unsafe_code)]

mod external;
mod fuse;
mod graph;
mod options;
mod report;
mod rewrite;
mod tensor;
mod weight;

/// The ONNX message types the quantizer reads and writes (generated from
/// `proto/onnx_subset.proto`). The tests include the same generated file to build their graphs.
#[allow(clippy::all, clippy::pedantic, clippy::restriction, missing_debug_implementations, unused_qualifications)]
mod onnx {
    include!(concat!(env!("OUT_DIR"), "/onnx/mod.rs"));
    pub use onnx_subset::*;
}

use protobuf::Message;

use crate::graph::{MS_DOMAIN, initializer_bytes};
use crate::onnx::{ModelProto, OperatorSetIdProto};
use crate::rewrite::Rewriter;

pub use external::{MAX_INLINE_WEIGHT_BYTES, ReadExternal};
pub use options::{Activations, Fusion, Granularity, QuantizeOptions, WeightType};
pub use report::{CalibrationGraph, Fused, Kept, QuantizeError, QuantizeReport, Rewritten};
pub use rewrite::{CALIBRATION_OUTPUT, calibration_model};

/// Rewrites `model` (the bytes of an .onnx file) for int8 on the CPU. Returns the new model's
/// bytes and what was done; a model with no constant-weight MatMul or Gemm is an error that says
/// why each candidate was left alone. A model whose weights are in an external data file needs
/// [`quantize_external`], which is given a way to read it.
pub fn quantize(model: &[u8], options: &QuantizeOptions) -> Result<(Vec<u8>, QuantizeReport), QuantizeError> {
    let mut m = parse(model)?;
    let report = rewrite_model(&mut m, None, options)?;
    Ok((m.write_to_bytes().map_err(QuantizeError::Write)?, report))
}

/// [`quantize`] for a model whose weights may live in external data files (ONNX's form for models
/// over 2 GB, such as a converted decoder's `model.onnx_data`): `read` reads them (this crate
/// does no I/O). Where the rewritten weights still pass [`MAX_INLINE_WEIGHT_BYTES`] (or
/// [`QuantizeOptions::external_data`] asks), the large
/// ones are returned as [`Quantized::data`], to be written beside the model as `data_file`, which
/// the model then names; else everything is in [`Quantized::model`].
pub fn quantize_external(
    model: &[u8],
    read: &mut ReadExternal<'_>,
    data_file: &str,
    options: &QuantizeOptions,
) -> Result<(Quantized, QuantizeReport), QuantizeError> {
    let mut m = parse(model)?;
    let report = rewrite_model(&mut m, Some(read), options)?;
    let graph = m.graph.as_mut().ok_or(QuantizeError::NoGraph)?;
    let data = if options.external_data || initializer_bytes(graph) > MAX_INLINE_WEIGHT_BYTES {
        external::externalize(graph, data_file)
    } else {
        Vec::new()
    };
    Ok((Quantized { model: m.write_to_bytes().map_err(QuantizeError::Write)?, data }, report))
}

/// What [`quantize_external`] writes: the model and, where its weights are too large for one
/// file, the external data its large tensors point to (empty when there is none).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Quantized {
    pub model: Vec<u8>,
    pub data: Vec<u8>,
}

fn parse(model: &[u8]) -> Result<ModelProto, QuantizeError> {
    ModelProto::parse_from_bytes(model).map_err(QuantizeError::NotOnnx)
}

/// The rewrite itself, on a parsed model whose external weights `read` reads first (`None`: a
/// model given as bytes alone, whose weights must all be inside).
fn rewrite_model(
    m: &mut ModelProto,
    read: Option<&mut ReadExternal<'_>>,
    options: &QuantizeOptions,
) -> Result<QuantizeReport, QuantizeError> {
    let opset = m
        .opset_import
        .iter()
        .filter(|o| matches!(o.domain.as_deref().unwrap_or_default(), "" | "ai.onnx"))
        .filter_map(|o| o.version)
        .max()
        .unwrap_or(0);
    if opset < 10 {
        return Err(QuantizeError::UnsupportedOpset(opset));
    }
    let graph = m.graph.as_mut().ok_or(QuantizeError::NoGraph)?;
    external::inline(graph, read)?;
    let before = initializer_bytes(graph);
    let nodes_before = graph.node.len();
    let mut r = Rewriter::new(graph, options, opset);
    r.run()?;
    let (rewritten, kept_fp32, int8_gathers) = (r.rewritten, r.kept, r.gathers);
    if rewritten.is_empty() && int8_gathers.is_empty() {
        let why = if kept_fp32.is_empty() {
            "the graph has no MatMul or Gemm node".to_owned()
        } else {
            kept_fp32.iter().map(|k| format!("{} {}: {}", k.op, k.node, k.reason)).collect::<Vec<_>>().join("; ")
        };
        return Err(QuantizeError::NothingToQuantize(why));
    }
    let fused = fuse::fuse(graph, &options.fusions, opset);
    let after = initializer_bytes(graph);
    let nodes_after = graph.node.len();
    if !m.opset_import.iter().any(|o| o.domain.as_deref() == Some(MS_DOMAIN)) {
        let mut ms = OperatorSetIdProto::new();
        ms.domain = Some(MS_DOMAIN.to_owned());
        ms.version = Some(1);
        m.opset_import.push(ms);
    }
    Ok(QuantizeReport {
        rewritten,
        kept_fp32,
        int8_gathers,
        fused,
        nodes_before,
        nodes_after,
        opset,
        weight_bytes_before: before,
        weight_bytes_after: after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_same_on_every_machine() {
        assert_eq!(QuantizeOptions::default().weights, WeightType::Auto);
        // `Auto` becomes a concrete type only when it is used, for the CPU it runs on.
        assert_eq!(WeightType::Auto.resolved(), WeightType::for_this_cpu());
        assert_eq!((WeightType::Int8.resolved(), WeightType::Uint8.resolved()), (WeightType::Int8, WeightType::Uint8));
    }
}

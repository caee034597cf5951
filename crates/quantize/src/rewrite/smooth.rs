//! SmoothQuant: per-channel factors for LayerNorm outputs, and the calibration graph that measures them.

use crate::external::{self, ReadExternal};
use crate::tensor::{self, FLOAT};
use crate::{QuantizeError, QuantizeOptions};
use protobuf::Message;

use super::Rewriter;
use crate::CalibrationGraph;
use crate::graph::*;
use crate::onnx::{ModelProto, TypeProto, ValueInfoProto, type_proto};
use crate::weight::*;

/// The output [`calibration_model`] adds.
pub const CALIBRATION_OUTPUT: &str = "nornir_calibration";

/// `model` with one more output, [`CALIBRATION_OUTPUT`]: the magnitudes `|x|` of every activation
/// that smoothing would divide (each `LayerNormalization` output read by a MatMul the rewrite
/// makes int8), concatenated along the last axis, `[batch, tokens, sum of widths]`. Max-pooled
/// over a text's tokens and then over sample texts, they are the channel maxima that
/// [`QuantizeOptions::channel_max`] takes. The rest of the graph is unchanged.
/// Weights in external data are read with `read` to decide (`None`: a model given as bytes alone,
/// whose weights must all be inside), and the graph written still points at them: write it
/// beside the same data files. A graph without a `LayerNormalization` has nothing to calibrate
/// and is refused before any weight is read.
pub fn calibration_model(
    model: &[u8],
    read: Option<&mut ReadExternal<'_>>,
    options: &QuantizeOptions,
) -> Result<CalibrationGraph, QuantizeError> {
    let mut m = ModelProto::parse_from_bytes(model).map_err(QuantizeError::NotOnnx)?;
    let graph = m.graph.as_mut().ok_or(QuantizeError::NoGraph)?;
    let is_layer_norm = |n: &crate::onnx::NodeProto| op(n) == "LayerNormalization" && default_domain(n);
    let outside =
        if graph.node.iter().any(is_layer_norm) { external::inline(graph, read)? } else { Default::default() };
    let mut found = Vec::new();
    {
        let r = Rewriter::new(graph, options, 0);
        for n in &r.g.node {
            if !is_layer_norm(n) {
                continue;
            }
            let (Some(x), Some(gamma)) = (n.output.first(), n.input.get(1).and_then(|g| r.init(g))) else { continue };
            if !r.int8_readers(x)?.is_empty() {
                found.push((x.clone(), tensor::numel(gamma)));
            }
        }
    }
    if found.is_empty() {
        return Err(QuantizeError::NothingToQuantize(
            "no LayerNormalization output feeds a MatMul with a constant weight, so there is nothing to calibrate"
                .to_owned(),
        ));
    }
    let data_files = outside.locations();
    external::restore(graph, outside);
    let mut magnitudes = Vec::new();
    for (x, _) in &found {
        let abs = format!("{x}_nornir_calibration_abs");
        graph.node.push(new_node("Abs", "", format!("{x}_nornir_calibration"), &[x], &[&abs]));
        magnitudes.push(abs);
    }
    let inputs: Vec<&str> = magnitudes.iter().map(String::as_str).collect();
    let mut concat = new_node("Concat", "", "nornir_calibration_concat".to_owned(), &inputs, &[CALIBRATION_OUTPUT]);
    concat.attribute.push(int_attribute("axis", -1));
    graph.node.push(concat);
    let mut tensor_type = type_proto::Tensor::new();
    tensor_type.elem_type = Some(FLOAT);
    let mut ty = TypeProto::new();
    ty.tensor_type = protobuf::MessageField::some(tensor_type);
    let mut out = ValueInfoProto::new();
    out.name = Some(CALIBRATION_OUTPUT.to_owned());
    out.type_ = protobuf::MessageField::some(ty);
    graph.output.push(out);
    Ok(CalibrationGraph { model: m.write_to_bytes().map_err(QuantizeError::Write)?, activations: found, data_files })
}

impl Rewriter<'_> {
    /// SmoothQuant's per-channel factors for `x` when a `LayerNormalization` with constant scale
    /// (and bias) makes it: `f_j = a_j^alpha / w_j^(1 - alpha)`, with `a_j = |gamma_j| + |beta_j|`
    /// (how large channel j of the normalised rows can be) and `w_j` the largest weight of row j
    /// over every MatMul that reads `x` and is rewritten. Channels that LayerNorm makes large (the
    /// outlier dimensions of BERT-like models) are divided down before per-token quantization,
    /// and their weight rows multiplied up, which the weights' per-column scales absorb. Computed
    /// once per `x`; `None` where `x` is not such a LayerNorm's output.
    pub(crate) fn smoothing(&mut self, x: &str) -> Result<Option<Vec<f32>>, QuantizeError> {
        if let Some(done) = self.smoothings.get(x) {
            return Ok(done.clone());
        }
        let factors = self.compute_smoothing(x)?;
        self.smoothings.insert(x.to_owned(), factors.clone());
        Ok(factors)
    }

    /// The MatMul and Gemm nodes that read `x` as their input and that the rewrite makes int8 (a
    /// constant weight, no `keep_fp32` pattern), with their weights: what smoothing rescales and
    /// calibration measures for.
    pub(crate) fn int8_readers(&self, x: &str) -> Result<Vec<(usize, Constant)>, QuantizeError> {
        let mut readers = Vec::new();
        for &j in self.consumers.get(x).into_iter().flatten() {
            let n = &self.g.node[j];
            // A Gemm with transA reads x transposed, and the rewrite keeps it in float.
            let reads_x = matches!(op(n), "MatMul" | "Gemm")
                && default_domain(n)
                && n.input.first().map(String::as_str) == Some(x)
                && n.input.len() > 1
                && !(op(n) == "Gemm" && attr_i(n, "transA", 0) != 0);
            if !reads_x || self.kept_by_pattern(&node_name(n, j), &n.input[1]).is_some() {
                continue;
            }
            if let Ok(c) = self.constant(&n.input[1])? {
                readers.push((j, c));
            }
        }
        Ok(readers)
    }

    pub(crate) fn compute_smoothing(&self, x: &str) -> Result<Option<Vec<f32>>, QuantizeError> {
        let Some(alpha) = self.options.smoothing else { return Ok(None) };
        let Some((_, ln)) = self.producer_of(x).filter(|(_, n)| op(n) == "LayerNormalization" && default_domain(n))
        else {
            return Ok(None);
        };
        let gamma = match ln.input.get(1).and_then(|g| self.init(g)) {
            Some(t) if t.data_type == Some(FLOAT) => tensor::f32_values(t)?,
            _ => return Ok(None),
        };
        let beta = match ln.input.get(2).filter(|b| !b.is_empty()).map(|b| self.init(b)) {
            None => vec![0.0; gamma.len()],
            Some(Some(t)) if t.data_type == Some(FLOAT) => tensor::f32_values(t)?,
            Some(_) => return Ok(None),
        };
        if beta.len() != gamma.len() {
            return Ok(None);
        }
        let k = gamma.len();
        let mut row_max = vec![0f32; k];
        for (j, c) in self.int8_readers(x)? {
            let n = &self.g.node[j];
            let transposed = op(n) == "Gemm" && attr_i(n, "transB", 0) != 0;
            let (rows, cols) = (c.dims[0], c.dims[1]);
            if (if transposed { cols } else { rows }) != k {
                return Ok(None);
            }
            for (idx, v) in c.values().iter().enumerate() {
                let i = if transposed { idx % cols } else { idx / cols };
                row_max[i] = row_max[i].max(v.abs());
            }
        }
        let measured = self.options.channel_max.get(x).filter(|m| m.len() == k);
        let factors = (0..k)
            .map(|j| {
                let a = measured.map_or(gamma[j].abs() + beta[j].abs(), |m| m[j]);
                let f = a.powf(alpha) / row_max[j].powf(1.0 - alpha);
                if f.is_finite() && f > 0.0 { f.clamp(1e-3, 1e3) } else { 1.0 }
            })
            .collect();
        Ok(Some(factors))
    }
}

//! MatMul and Gemm with a constant weight made int8, their inputs quantized per token or per tensor.

use super::{PerTokenConstants, Rewriter};
use crate::graph::*;
use crate::onnx::NodeProto;
use crate::tensor::{self};
use crate::weight::Int8Weight;
use crate::{Activations, Granularity, QuantizeError, Rewritten, WeightType};

impl Rewriter<'_> {
    pub(crate) fn matmul(&mut self, i: usize) -> Result<(), QuantizeError> {
        let n = self.g.node[i].clone();
        let name = node_name(&n, i);
        let is_gemm = op(&n) == "Gemm";
        if n.input.len() < 2 || n.output.is_empty() {
            self.keep(i, "malformed node");
            return Ok(());
        }
        let weight_name = n.input[1].clone();
        if let Some(p) = self.kept_by_pattern(&name, &weight_name) {
            self.keep(i, format!("kept in float32 by the pattern {p:?}"));
            return Ok(());
        }
        if is_gemm && attr_i(&n, "transA", 0) != 0 {
            self.keep(i, "Gemm with transA");
            return Ok(());
        }
        let c = match self.constant(&weight_name)? {
            Ok(c) => c,
            Err(reason) => {
                self.keep(i, reason);
                return Ok(());
            }
        };
        let transposed = is_gemm && attr_i(&n, "transB", 0) != 0;
        let (k, cols) = if transposed { (c.dims[1], c.dims[0]) } else { (c.dims[0], c.dims[1]) };
        let smooth = match self.options.activations {
            Activations::PerToken => self.smoothing(&n.input[0])?,
            Activations::PerTensor => None,
        };
        let mut w = c.to_int8(self.options.granularity, transposed, smooth.as_deref());
        if is_gemm {
            let alpha = attr_f(&n, "alpha", 1.0);
            w.scale.iter_mut().for_each(|s| *s *= alpha);
        }

        // The bias: Gemm's C, or a lone Add of a constant vector after a MatMul.
        let mut output = n.output[0].clone();
        let bias = match self.bias(&n, is_gemm, cols, &mut output) {
            Ok(bias) => bias,
            Err(reason) => {
                self.keep(i, reason);
                return Ok(());
            }
        };

        let (qname, sname, weight_zero_point) = self.store_weight(&c.base, k, cols, &w);
        let activations = self.options.activations;
        let nodes = match activations {
            Activations::PerTensor => {
                let mut inputs = vec![n.input[0].as_str(), qname.as_str(), sname.as_str()];
                inputs.push(weight_zero_point.as_deref().unwrap_or_default());
                match &bias {
                    Some(b) => inputs.push(b.as_str()),
                    None if weight_zero_point.is_none() => {
                        inputs.pop();
                    }
                    None => {}
                }
                let node_name = self.fresh(&format!("{name}_int8"));
                vec![new_node("DynamicQuantizeMatMul", MS_DOMAIN, node_name, &inputs, &[output.as_str()])]
            }
            Activations::PerToken => self.per_token_matmul(
                &name,
                &n.input[0],
                smooth.as_deref(),
                [&qname, &sname],
                weight_zero_point.as_deref(),
                bias.as_deref(),
                &output,
            ),
        };
        self.replaced.insert(i, nodes);
        self.dead_candidates.extend(c.chain);
        let granularity = if w.scale.len() == 1 { Granularity::PerTensor } else { Granularity::PerChannel };
        self.rewritten.push(Rewritten {
            node: name,
            op: op(&n).to_owned(),
            weight: weight_name,
            shape: [k, cols],
            source: format!("{}{}", c.source, if w.reused { " (reused as stored)" } else { " (quantized)" }),
            granularity,
            activations,
            weights: self.options.weights.resolved(),
            bias_folded: bias.is_some(),
        });
        Ok(())
    }

    /// The bias the int8 node adds: Gemm's C (times beta), or the constant vector of a lone
    /// `Add` after a MatMul, which is then removed and whose output becomes `output`. The reason
    /// to keep the node in float32 when its C is not such a vector.
    fn bias(
        &mut self,
        n: &NodeProto,
        is_gemm: bool,
        cols: usize,
        output: &mut String,
    ) -> Result<Option<String>, &'static str> {
        let mut bias: Option<String> = None;
        if is_gemm {
            if let Some(cname) = n.input.get(2).filter(|s| !s.is_empty()) {
                let beta = attr_f(n, "beta", 1.0);
                match self.bias_vector(cname, cols) {
                    Some(v) => {
                        bias = Some(self.add_f32(
                            &format!("{cname}_bias"),
                            &[cols as i64],
                            &v.iter().map(|x| x * beta).collect::<Vec<_>>(),
                        ))
                    }
                    None => return Err("Gemm whose C is not a constant vector of the output width"),
                }
            }
        } else if self.uses.get(&*output) == Some(&1)
            && let Some(&j) = self.consumers.get(&*output).and_then(|c| c.first())
            && op(&self.g.node[j]) == "Add"
            && default_domain(&self.g.node[j])
            && self.g.node[j].input.len() == 2
        {
            let add = &self.g.node[j];
            let other = if add.input[0] == *output { add.input[1].clone() } else { add.input[0].clone() };
            if let Some(v) = self.bias_vector(&other, cols) {
                let add_out = add.output[0].clone();
                bias = Some(if self.init(&other).is_some_and(|t| t.dims.len() == 1) {
                    other
                } else {
                    self.add_f32(&format!("{other}_1d"), &[cols as i64], &v)
                });
                *output = add_out;
                self.removed.insert(j);
            }
        }
        Ok(bias)
    }

    /// Adds the int8 (or uint8) weight and its scales as initializers: their names, and the
    /// weight's zero point for uint8.
    fn store_weight(
        &mut self,
        base_name: &str,
        k: usize,
        cols: usize,
        w: &Int8Weight,
    ) -> (String, String, Option<String>) {
        let base = format!("{}_nornir_int8", base_name);
        let qname = self.fresh(&base);
        let sname = self.fresh(&format!("{base}_scale"));
        let sdims: Vec<i64> = if w.scale.len() == 1 { Vec::new() } else { vec![cols as i64] };
        // uint8 weights are the int8 ones shifted by their zero point 128.
        let weight_zero_point = match self.options.weights.resolved() {
            WeightType::Int8 => {
                self.new_inits.push(tensor::new_i8(&qname, &[k as i64, cols as i64], &w.q));
                None
            }
            _ => {
                let shifted: Vec<u8> = w.q.iter().map(|&v| (i16::from(v) + 128) as u8).collect();
                self.new_inits.push(tensor::new_u8(&qname, &[k as i64, cols as i64], &shifted));
                Some(self.per_token_constants().zero_point)
            }
        };
        self.new_inits.push(tensor::new_f32(&sname, &sdims, &w.scale));
        (qname, sname, weight_zero_point)
    }

    /// `x @ w` with `x` quantized per row: `MatMulIntegerToFloat(q, w, s, w_scale, 128)` of the
    /// row-quantized input (see [`Self::quantized_input`]), which multiplies each output row by
    /// its `s` and each column by its weight scale. The bias is a separate `Add`: with per-row
    /// scales, ONNX Runtime's kernel would scale a bias passed to it as well.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn per_token_matmul(
        &mut self,
        name: &str,
        x: &str,
        smooth: Option<&[f32]>,
        [w, w_scale]: [&str; 2],
        w_zero_point: Option<&str>,
        bias: Option<&str>,
        out: &str,
    ) -> Vec<NodeProto> {
        let c = self.per_token_constants();
        let (mut nodes, q, scale) = self.quantized_input(name, x, smooth);
        let product = if bias.is_some() { self.fresh(&format!("{out}_before_bias")) } else { out.to_owned() };
        nodes.push(new_node(
            "MatMulIntegerToFloat",
            MS_DOMAIN,
            self.fresh(&format!("{name}_int8")),
            &[&q, w, &scale, w_scale, &c.zero_point, w_zero_point.unwrap_or_default()]
                [..5 + usize::from(w_zero_point.is_some())],
            &[&product],
        ));
        if let Some(b) = bias {
            nodes.push(new_node("Add", "", self.fresh(&format!("{name}_bias")), &[&product, b], &[out]));
        }
        nodes
    }

    /// The nodes that quantize `x` per row, made once for all the MatMuls that read `x` (a
    /// layer's query, key and value share theirs), and the names of the uint8 rows and their
    /// scales: `s = max(|x|, floor) / 127` over the last axis and
    /// `q = QuantizeLinear(x * (127 / max(|x|, floor)), 1, 128)`. With `smooth`, `x` is first
    /// divided by it, channel by channel (the weights were multiplied by it). The nodes are empty
    /// when an earlier MatMul made them.
    pub(crate) fn quantized_input(
        &mut self,
        name: &str,
        x: &str,
        smooth: Option<&[f32]>,
    ) -> (Vec<NodeProto>, String, String) {
        if let Some((q, scale)) = self.quantized.get(x) {
            return (Vec::new(), q.clone(), scale.clone());
        }
        let c = self.per_token_constants();
        let value = |s: &mut Self, suffix: &str| s.fresh(&format!("{x}_{suffix}"));
        let mut nodes = Vec::new();
        let input = match smooth {
            Some(factors) => {
                let inverse: Vec<f32> = factors.iter().map(|f| 1.0 / f).collect();
                let divisor = self.add_f32(&format!("{x}_smoothing"), &[inverse.len() as i64], &inverse);
                let smoothed = value(self, "smoothed");
                nodes.push(new_node("Mul", "", self.fresh(&format!("{name}_smooth")), &[x, &divisor], &[&smoothed]));
                smoothed
            }
            None => x.to_owned(),
        };
        let abs = value(self, "abs");
        let max = value(self, "row_max");
        let floored = value(self, "row_max_floored");
        let inverse = value(self, "row_inverse_scale");
        let scale = value(self, "row_scale");
        let scaled = value(self, "scaled");
        let q = value(self, "uint8");
        nodes.push(new_node("Abs", "", self.fresh(&format!("{name}_abs")), &[&input], &[&abs]));
        let mut reduce = if self.opset >= 18 {
            new_node("ReduceMax", "", self.fresh(&format!("{name}_row_max")), &[&abs, &c.last_axis], &[&max])
        } else {
            let mut r = new_node("ReduceMax", "", self.fresh(&format!("{name}_row_max")), &[&abs], &[&max]);
            r.attribute.push(ints_attribute("axes", vec![-1]));
            r
        };
        reduce.attribute.push(int_attribute("keepdims", 1));
        nodes.push(reduce);
        nodes.extend([
            new_node("Max", "", self.fresh(&format!("{name}_row_floor")), &[&max, &c.floor], &[&floored]),
            new_node("Div", "", self.fresh(&format!("{name}_row_inverse")), &[&c.levels, &floored], &[&inverse]),
            new_node("Div", "", self.fresh(&format!("{name}_row_scale")), &[&floored, &c.levels], &[&scale]),
            new_node("Mul", "", self.fresh(&format!("{name}_scale_rows")), &[&input, &inverse], &[&scaled]),
            new_node(
                "QuantizeLinear",
                "",
                self.fresh(&format!("{name}_quantize")),
                &[&scaled, &c.one, &c.zero_point],
                &[&q],
            ),
        ]);
        self.quantized.insert(x.to_owned(), (q.clone(), scale.clone()));
        (nodes, q, scale)
    }

    pub(crate) fn per_token_constants(&mut self) -> PerTokenConstants {
        if let Some(c) = &self.per_token {
            return c.clone();
        }
        let levels = self.add_f32("nornir_int8_levels", &[], &[127.0]);
        let floor = self.add_f32("nornir_int8_scale_floor", &[], &[1e-30]);
        let one = self.add_f32("nornir_int8_one", &[], &[1.0]);
        let zero_point = self.fresh("nornir_int8_zero_point");
        self.new_inits.push(tensor::new_u8(&zero_point, &[], &[128]));
        let last_axis = self.fresh("nornir_int8_last_axis");
        self.new_inits.push(tensor::new_i64(&last_axis, &[1], &[-1]));
        let c = PerTokenConstants { levels, floor, one, zero_point, last_axis };
        self.per_token = Some(c.clone());
        c
    }
}

//! The rewrite on tiny graphs built here, each run before and after on the real ONNX Runtime
//! 1.31.1 CPU build (`NORNIR_TEST_ORT_CPU`, fetched by `cargo xtask test`): a constant MatMul, a
//! weight built from int8 through DequantizeLinear and through Cast and Mul, a Gemm with bias and
//! transB, a MatMul of two activations that must stay float32, and an int8 embedding table. The
//! int8 result must match float32 within a bound derived from the two quantization steps. Both
//! activation schemes are run: per token (the default), whose rows do not depend on each other,
//! and per tensor (ONNX Runtime's DynamicQuantizeMatMul), whose rows do.

use nornir_quantize::onnx::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TypeProto, ValueInfoProto,
    tensor_shape_proto, type_proto,
};
use nornir_quantize::{Activations, Granularity, QuantizeError, QuantizeOptions, WeightType, quantize};
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::TensorRef;
use protobuf::Message;

const K: usize = 24;
const N: usize = 10;
const ROWS: usize = 5;

fn env() -> &'static ort::environment::Environment {
    static ENV: std::sync::OnceLock<ort::environment::Environment> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        ort::init_from(nornir_test_support::env_path("NORNIR_TEST_ORT_CPU"))
            .expect("load ONNX Runtime")
            .with_name("quantize-tests")
            .build()
            .expect("environment")
    })
}

/// Deterministic values in about [-1, 1] with a few larger ones, as real weights have.
fn values(seed: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = ((i * 7919 + seed * 104_729) % 1000) as f32 / 500.0 - 1.0;
            if i % 37 == 0 { x * 3.0 } else { x }
        })
        .collect()
}

fn f32_tensor(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    let mut t = TensorProto::new();
    t.name = Some(name.into());
    t.dims = dims.to_vec();
    t.data_type = Some(1);
    t.raw_data = Some(v.iter().flat_map(|x| x.to_le_bytes()).collect());
    t
}

fn i8_tensor(name: &str, dims: &[i64], v: &[i8]) -> TensorProto {
    let mut t = TensorProto::new();
    t.name = Some(name.into());
    t.dims = dims.to_vec();
    t.data_type = Some(3);
    t.raw_data = Some(v.iter().map(|&x| x as u8).collect());
    t
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], ints: &[(&str, i64)]) -> NodeProto {
    let mut n = NodeProto::new();
    n.op_type = Some(op.into());
    n.name = Some(format!("{op}_{}", outputs[0]));
    n.input = inputs.iter().map(|s| (*s).into()).collect();
    n.output = outputs.iter().map(|s| (*s).into()).collect();
    for (name, v) in ints {
        let mut a = AttributeProto::new();
        a.name = Some((*name).into());
        a.i = Some(*v);
        a.type_ = Some(2);
        n.attribute.push(a);
    }
    n
}

fn value(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    let mut shape = nornir_quantize::onnx::TensorShapeProto::new();
    for &d in dims {
        let mut dim = tensor_shape_proto::Dimension::new();
        dim.dim_value = Some(d);
        shape.dim.push(dim);
    }
    let mut tt = type_proto::Tensor::new();
    tt.elem_type = Some(elem);
    tt.shape = protobuf::MessageField::some(shape);
    let mut ty = TypeProto::new();
    ty.tensor_type = protobuf::MessageField::some(tt);
    let mut v = ValueInfoProto::new();
    v.name = Some(name.into());
    v.type_ = protobuf::MessageField::some(ty);
    v
}

fn model(nodes: Vec<NodeProto>, inits: Vec<TensorProto>, inputs: Vec<ValueInfoProto>, out_dims: &[i64]) -> Vec<u8> {
    model_at(17, nodes, inits, inputs, out_dims)
}

fn model_at(
    opset_version: i64,
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    out_dims: &[i64],
) -> Vec<u8> {
    let mut g = GraphProto::new();
    g.name = Some("fixture".into());
    g.node = nodes;
    g.initializer = inits;
    g.input = inputs;
    g.output = vec![value("y", 1, out_dims)];
    let mut m = ModelProto::new();
    m.ir_version = Some(8);
    let mut opset = OperatorSetIdProto::new();
    opset.domain = Some(String::new());
    opset.version = Some(opset_version);
    m.opset_import.push(opset);
    m.graph = protobuf::MessageField::some(g);
    m.write_to_bytes().expect("encode")
}

/// Runs `bytes` on `x` (`[ROWS, K]` float) and returns `y`.
fn run(bytes: &[u8], x: &[f32]) -> Vec<f32> {
    run_rows(bytes, x, ROWS)
}

/// Runs `bytes` on `x` (`[rows, K]` float) and returns `y`.
fn run_rows(bytes: &[u8], x: &[f32], rows: usize) -> Vec<f32> {
    let mut s = Session::builder(env())
        .expect("builder")
        .with_optimization_level(GraphOptimizationLevel::Level1)
        .expect("level")
        .commit_from_memory(bytes)
        .expect("the model loads in ONNX Runtime");
    let feed: Vec<(String, ort::session::SessionInputValue<'_>)> =
        vec![("x".into(), TensorRef::from_array_view(([rows, K], x)).expect("tensor").into())];
    let out = s.run(feed).expect("run");
    out["y"].try_extract_tensor::<f32>().expect("float output").1.to_vec()
}

/// |int8 - float32| per output is at most K * (max|x| * sw/2 + max|w| * sx/2 + sx * sw/4), with
/// sw the weight step of that column and sx the activation step: `(max - min) / 255` over the
/// whole input per tensor, `max|row| / 127` per token; the larger of the two is taken.
fn assert_close(w: &[f32], x: &[f32], fp32: &[f32], int8: &[f32]) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let per_tensor = (x.iter().fold(0f32, |m, &v| m.max(v)) - x.iter().fold(0f32, |m, &v| m.min(v))) / 255.0;
    for j in 0..N {
        let wmax = (0..K).fold(0f32, |m, i| m.max(w[i * N + j].abs()));
        let sw = wmax / 127.0;
        for r in 0..ROWS {
            let row_max = x[r * K..(r + 1) * K].iter().fold(0f32, |m, v| m.max(v.abs()));
            let sx = per_tensor.max(row_max / 127.0);
            let bound = K as f32 * (amax * sw / 2.0 + wmax * sx / 2.0 + sx * sw / 4.0);
            let (a, b) = (fp32[r * N + j], int8[r * N + j]);
            assert!((a - b).abs() <= bound, "row {r} col {j}: {a} vs {b}, bound {bound}");
        }
    }
}

fn ops(bytes: &[u8]) -> Vec<String> {
    let m = ModelProto::parse_from_bytes(bytes).expect("decode");
    m.graph.node.iter().map(|n| n.op_type.clone().unwrap_or_default()).collect()
}

fn x() -> Vec<f32> {
    values(1, ROWS * K)
}

/// The nodes one int8 MatMul becomes with per-token activations (and an `Add` for a bias).
fn per_token_ops(bias: bool) -> Vec<&'static str> {
    let mut ops = vec!["Abs", "ReduceMax", "Max", "Div", "Div", "Mul", "QuantizeLinear", "MatMulIntegerToFloat"];
    if bias {
        ops.push("Add");
    }
    ops
}

fn per_tensor() -> QuantizeOptions {
    QuantizeOptions::default().with_activations(Activations::PerTensor)
}

#[test]
fn a_constant_matmul_with_its_bias_becomes_one_int8_node() {
    let w = values(2, K * N);
    let b = values(3, N);
    let bytes = model(
        vec![node("MatMul", &["x", "w"], &["h"], &[]), node("Add", &["h", "b"], &["y"], &[])],
        vec![f32_tensor("w", &[K as i64, N as i64], &w), f32_tensor("b", &[N as i64], &b)],
        vec![value("x", 1, &[ROWS as i64, K as i64])],
        &[ROWS as i64, N as i64],
    );
    let (int8, report) = quantize(&bytes, &per_tensor()).expect("quantize");
    assert_eq!(ops(&int8), ["DynamicQuantizeMatMul"], "MatMul and Add fused into one node");
    assert_eq!(report.rewritten.len(), 1);
    assert!(report.rewritten[0].bias_folded);
    assert_eq!(report.rewritten[0].shape, [K, N]);
    let m = ModelProto::parse_from_bytes(&int8).expect("decode");
    assert!(m.graph.initializer.iter().all(|t| t.name() != "w"), "the float32 weight is gone");
    assert_close(&w, &x(), &run(&bytes, &x()), &run(&int8, &x()));

    let (int8, report) = quantize(&bytes, &QuantizeOptions::default()).expect("quantize");
    assert_eq!(ops(&int8), per_token_ops(true), "the bias is added after the row scales");
    assert_eq!(report.rewritten[0].activations, Activations::PerToken);
    assert!(report.rewritten[0].bias_folded);
    assert_close(&w, &x(), &run(&bytes, &x()), &run(&int8, &x()));
}

/// uint8 weights are the int8 ones plus 128 with a zero point: the same products, by a kernel
/// that never saturates. This CPU's own choice must meet the bound; int8 weights with AVX2 alone
/// may not (ONNX Runtime's 16-bit pair sums), so their accuracy is checked only where this CPU
/// would choose them.
#[test]
fn weight_types_store_what_they_say() {
    let w = values(14, K * N);
    let bytes = model(
        vec![node("MatMul", &["x", "w"], &["y"], &[])],
        vec![f32_tensor("w", &[K as i64, N as i64], &w)],
        vec![value("x", 1, &[ROWS as i64, K as i64])],
        &[ROWS as i64, N as i64],
    );
    for activations in [Activations::PerToken, Activations::PerTensor] {
        let options = QuantizeOptions::default().with_activations(activations);
        let stored = |weights: WeightType| {
            let (int8, report) = quantize(&bytes, &options.clone().with_weights(weights)).expect("quantize");
            assert_eq!(report.rewritten[0].weights, weights);
            let m = ModelProto::parse_from_bytes(&int8).expect("decode");
            let t = m.graph.initializer.iter().find(|t| t.name().starts_with("w_nornir_int8")).expect("weight");
            (int8.clone(), t.data_type, t.raw_data.clone().unwrap_or_default())
        };
        let (_, i8_type, i8_raw) = stored(WeightType::Int8);
        let (uint8, u8_type, u8_raw) = stored(WeightType::Uint8);
        assert_eq!((i8_type, u8_type), (Some(3), Some(2)));
        assert!(i8_raw.iter().zip(&u8_raw).all(|(&s, &u)| i16::from(s as i8) + 128 == i16::from(u)));
        assert_close(&w, &x(), &run(&bytes, &x()), &run(&uint8, &x()));
        if WeightType::for_this_cpu() == WeightType::Int8 {
            assert_close(&w, &x(), &run(&bytes, &x()), &run(&stored(WeightType::Int8).0, &x()));
        }
    }
}

/// Per token, a row's result is the same alone or among others, to the bit; per tensor, the other
/// rows change its scale. Rows of very different magnitudes make the difference plain.
#[test]
fn per_token_rows_do_not_depend_on_their_batch() {
    let w = values(12, K * N);
    let b = values(13, N);
    let x: Vec<f32> = x().iter().enumerate().map(|(i, v)| v * [1.0, 0.05, 20.0, 0.3, 2.0][i / K]).collect();
    for opset in [13, 18] {
        let bytes = model_at(
            opset,
            vec![node("MatMul", &["x", "w"], &["h"], &[]), node("Add", &["h", "b"], &["y"], &[])],
            vec![f32_tensor("w", &[K as i64, N as i64], &w), f32_tensor("b", &[N as i64], &b)],
            vec![value("x", 1, &[-1, K as i64])],
            &[-1, N as i64],
        );
        let alone =
            |int8: &[u8]| -> Vec<f32> { (0..ROWS).flat_map(|r| run_rows(int8, &x[r * K..(r + 1) * K], 1)).collect() };
        let (token, _) = quantize(&bytes, &QuantizeOptions::default()).expect("quantize");
        assert_eq!(run(&token, &x), alone(&token), "opset {opset}: per-token rows alone and together");
        assert_close(&w, &x, &run(&bytes, &x), &run(&token, &x));
        let (tensor, _) = quantize(&bytes, &per_tensor()).expect("quantize");
        assert_ne!(run(&tensor, &x), alone(&tensor), "opset {opset}: per-tensor rows depend on their batch");
    }
}

#[test]
fn per_tensor_is_one_scale_and_still_within_its_bound() {
    let w = values(4, K * N);
    let bytes = model(
        vec![node("MatMul", &["x", "w"], &["y"], &[])],
        vec![f32_tensor("w", &[K as i64, N as i64], &w)],
        vec![value("x", 1, &[ROWS as i64, K as i64])],
        &[ROWS as i64, N as i64],
    );
    // One scale for all columns: the bound uses the largest weight of all.
    let wmax = w.iter().fold(0f32, |m, v| m.max(v.abs()));
    let flat: Vec<f32> = (0..K * N).map(|i| if i % N == 0 { wmax } else { w[i] }).collect();
    for options in [QuantizeOptions::default(), per_tensor()] {
        let (int8, report) = quantize(&bytes, &options.with_granularity(Granularity::PerTensor)).expect("quantize");
        assert_eq!(report.rewritten[0].granularity, Granularity::PerTensor);
        assert_close(&flat, &x(), &run(&bytes, &x()), &run(&int8, &x()));
    }
}

/// The default model's layout: int8 initializers dequantized in the graph, per output column.
#[test]
fn int8_weights_through_dequantize_linear_or_cast_and_mul_are_reused_as_stored() {
    let q: Vec<i8> = values(5, K * N).iter().map(|v| (v * 40.0).clamp(-127.0, 127.0) as i8).collect();
    let scale: Vec<f32> = (0..N).map(|j| 0.01 + j as f32 * 0.002).collect();
    let w: Vec<f32> = (0..K * N).map(|i| f32::from(q[i]) * scale[i % N]).collect();
    let graphs = [
        model(
            vec![
                node("DequantizeLinear", &["q", "s"], &["w"], &[("axis", 1)]),
                node("MatMul", &["x", "w"], &["y"], &[]),
            ],
            vec![i8_tensor("q", &[K as i64, N as i64], &q), f32_tensor("s", &[N as i64], &scale)],
            vec![value("x", 1, &[ROWS as i64, K as i64])],
            &[ROWS as i64, N as i64],
        ),
        model(
            vec![
                node("Cast", &["q"], &["qf"], &[("to", 1)]),
                node("Mul", &["qf", "s"], &["w"], &[]),
                node("MatMul", &["x", "w"], &["y"], &[]),
            ],
            vec![i8_tensor("q", &[K as i64, N as i64], &q), f32_tensor("s", &[1, N as i64], &scale)],
            vec![value("x", 1, &[ROWS as i64, K as i64])],
            &[ROWS as i64, N as i64],
        ),
    ];
    for bytes in graphs {
        let (int8, report) = quantize(&bytes, &QuantizeOptions::default()).expect("quantize");
        assert!(report.rewritten[0].source.contains("reused as stored"), "{:?}", report.rewritten[0]);
        assert_eq!(ops(&int8), per_token_ops(false), "the dequantizing nodes are gone");
        assert_close(&w, &x(), &run(&bytes, &x()), &run(&int8, &x()));
    }
}

#[test]
fn gemm_with_bias_and_transposed_weight() {
    let wt = values(6, N * K); // [N, K], transB = 1
    let c = values(7, N);
    let mut gemm = node("Gemm", &["x", "wt", "c"], &["y"], &[("transB", 1)]);
    let mut alpha = AttributeProto::new();
    alpha.name = Some("alpha".into());
    alpha.f = Some(0.5);
    alpha.type_ = Some(1);
    gemm.attribute.push(alpha);
    let bytes = model(
        vec![gemm],
        vec![f32_tensor("wt", &[N as i64, K as i64], &wt), f32_tensor("c", &[N as i64], &c)],
        vec![value("x", 1, &[ROWS as i64, K as i64])],
        &[ROWS as i64, N as i64],
    );
    let (int8, report) = quantize(&bytes, &QuantizeOptions::default()).expect("quantize");
    assert_eq!(ops(&int8), per_token_ops(true));
    assert!(report.rewritten[0].bias_folded);
    let w: Vec<f32> = (0..K * N).map(|i| 0.5 * wt[(i % N) * K + i / N]).collect();
    assert_close(&w, &x(), &run(&bytes, &x()), &run(&int8, &x()));
}

/// `x · xᵀ`-like products (attention) have no constant weight: they stay, and say why; with
/// nothing else in the graph, that is the one-line error.
#[test]
fn a_matmul_of_two_activations_stays_float32() {
    let w = values(8, K * N);
    let bytes = model(
        vec![
            node("Transpose", &["x"], &["xt"], &[]),
            node("MatMul", &["x", "xt"], &["g"], &[]),
            node("MatMul", &["g", "x"], &["gx"], &[]),
            node("MatMul", &["gx", "w"], &["y"], &[]),
        ],
        vec![f32_tensor("w", &[K as i64, N as i64], &w)],
        vec![value("x", 1, &[ROWS as i64, K as i64])],
        &[ROWS as i64, N as i64],
    );
    let (int8, report) = quantize(&bytes, &QuantizeOptions::default()).expect("quantize");
    assert_eq!(report.rewritten.len(), 1);
    assert_eq!(report.kept_fp32.len(), 2);
    assert!(report.kept_fp32[0].reason.contains("computed at run time"), "{:?}", report.kept_fp32);
    assert!(report.kept_fp32[1].reason.contains("graph input"), "{:?}", report.kept_fp32);
    assert_eq!(ops(&int8)[..3], ["Transpose", "MatMul", "MatMul"]);
    assert_eq!(ops(&int8)[3..], per_token_ops(false));
    let (a, b) = (run(&bytes, &x()), run(&int8, &x()));
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() <= 0.02 * scale), "{a:?} vs {b:?}");

    let only_activations = model(
        vec![node("Transpose", &["x"], &["xt"], &[]), node("MatMul", &["x", "xt"], &["y"], &[])],
        vec![],
        vec![value("x", 1, &[ROWS as i64, K as i64])],
        &[ROWS as i64, ROWS as i64],
    );
    match quantize(&only_activations, &QuantizeOptions::default()) {
        Err(e @ QuantizeError::NothingToQuantize(_)) => {
            assert!(e.to_string().contains("computed at run time"), "{e}")
        }
        other => panic!("expected NothingToQuantize, got {:?}", other.map(|(_, r)| r)),
    }
}

#[test]
fn keep_fp32_patterns_leave_matching_nodes_alone() {
    let w = values(9, K * N);
    let bytes = model(
        vec![node("MatMul", &["x", "w"], &["y"], &[])],
        vec![f32_tensor("w", &[K as i64, N as i64], &w)],
        vec![value("x", 1, &[ROWS as i64, K as i64])],
        &[ROWS as i64, N as i64],
    );
    let options = QuantizeOptions::default().with_keep_fp32(vec!["MatMul_y".into()]);
    let e = quantize(&bytes, &options).map(|(_, r)| r).expect_err("nothing left to quantize");
    assert!(e.to_string().contains("kept in float32 by the pattern \"MatMul_y\""), "{e}");
}

/// An embedding table stored as int8 rows with one scale each: the rows are gathered in int8 and
/// dequantized after, which gives exactly the same values.
#[test]
fn gather_from_an_int8_table_gathers_int8_rows() {
    let (vocab, dim) = (50usize, 8usize);
    let q: Vec<i8> = values(10, vocab * dim).iter().map(|v| (v * 60.0).clamp(-127.0, 127.0) as i8).collect();
    let scale: Vec<f32> = (0..vocab).map(|r| 0.01 + r as f32 * 0.001).collect();
    let w = values(11, dim * N);
    let bytes = model(
        vec![
            node("Cast", &["q"], &["qf"], &[("to", 1)]),
            node("Mul", &["qf", "s"], &["table"], &[]),
            node("Gather", &["table", "ids"], &["e"], &[]),
            node("MatMul", &["e", "w"], &["y"], &[]),
        ],
        vec![
            i8_tensor("q", &[vocab as i64, dim as i64], &q),
            f32_tensor("s", &[vocab as i64, 1], &scale),
            f32_tensor("w", &[dim as i64, N as i64], &w),
        ],
        vec![value("ids", 7, &[ROWS as i64])],
        &[ROWS as i64, N as i64],
    );
    let (int8, report) =
        quantize(&bytes, &QuantizeOptions::default().with_keep_fp32(vec!["w".into()])).expect("quantize");
    assert_eq!(report.int8_gathers.len(), 1);
    assert_eq!(ops(&int8), ["Gather", "Cast", "Gather", "Mul", "MatMul"]);
    let ids: Vec<i64> = vec![0, 7, 49, 3, 7];
    let run_ids = |b: &[u8]| -> Vec<f32> {
        let mut s = Session::builder(env()).expect("builder").commit_from_memory(b).expect("load");
        let feed: Vec<(String, ort::session::SessionInputValue<'_>)> =
            vec![("ids".into(), TensorRef::from_array_view(([ROWS], ids.as_slice())).expect("tensor").into())];
        let out = s.run(feed).expect("run");
        out["y"].try_extract_tensor::<f32>().expect("float").1.to_vec()
    };
    let (a, b) = (run_ids(&bytes), run_ids(&int8));
    assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() <= 1e-5 * (1.0 + p.abs())), "{a:?} vs {b:?}");
}

#[test]
fn bad_models_are_one_clear_error() {
    let e = quantize(b"this is not a model", &QuantizeOptions::default()).map(|(_, r)| r).expect_err("garbage");
    assert!(matches!(e, QuantizeError::NotOnnx(_)), "{e}");
    let old = {
        let mut m = ModelProto::parse_from_bytes(&model(
            vec![node("MatMul", &["x", "w"], &["y"], &[])],
            vec![f32_tensor("w", &[K as i64, N as i64], &values(1, K * N))],
            vec![value("x", 1, &[ROWS as i64, K as i64])],
            &[ROWS as i64, N as i64],
        ))
        .expect("decode");
        m.opset_import[0].version = Some(9);
        m.write_to_bytes().expect("encode")
    };
    let e = quantize(&old, &QuantizeOptions::default()).map(|(_, r)| r).expect_err("opset 9");
    assert!(e.to_string().contains("opset 9"), "{e}");
    let external = {
        let mut t = f32_tensor("w", &[K as i64, N as i64], &[]);
        t.raw_data = None;
        t.data_location = Some(1);
        model(
            vec![node("MatMul", &["x", "w"], &["y"], &[])],
            vec![t],
            vec![value("x", 1, &[ROWS as i64, K as i64])],
            &[ROWS as i64, N as i64],
        )
    };
    let e = quantize(&external, &QuantizeOptions::default()).map(|(_, r)| r).expect_err("external data");
    assert!(e.to_string().contains("external data file"), "{e}");
}

/// A LayerNorm whose scale makes two channels 40 times the others, feeding a MatMul (a layer's
/// query in miniature): the calibration graph reports each channel's largest magnitude, and
/// smoothing with those maxima brings the int8 result closer to float32 than per-token
/// quantization alone, whose scale the two large channels set for every other channel.
#[test]
fn smoothing_a_layernorm_output_with_calibrated_maxima() {
    use nornir_quantize::{CALIBRATION_OUTPUT, calibration_model};
    let gamma: Vec<f32> = (0..K).map(|j| if j % 12 == 5 { 40.0 } else { 1.0 }).collect();
    let beta: Vec<f32> = (0..K).map(|j| 0.01 * j as f32).collect();
    let w = values(15, K * N);
    let bytes = model_at(
        17,
        vec![
            node("LayerNormalization", &["x", "gamma", "beta"], &["ln"], &[("axis", -1)]),
            node("MatMul", &["ln", "w"], &["y"], &[]),
        ],
        vec![
            f32_tensor("gamma", &[K as i64], &gamma),
            f32_tensor("beta", &[K as i64], &beta),
            f32_tensor("w", &[K as i64, N as i64], &w),
        ],
        vec![value("x", 1, &[ROWS as i64, K as i64])],
        &[ROWS as i64, N as i64],
    );
    let options = QuantizeOptions::default();
    let calibration = calibration_model(&bytes, &options).expect("calibration graph");
    assert_eq!(calibration.activations, [("ln".to_owned(), K)]);
    let mut s = Session::builder(env()).expect("builder").commit_from_memory(&calibration.model).expect("load");
    let x = x();
    let feed: Vec<(String, ort::session::SessionInputValue<'_>)> =
        vec![("x".into(), TensorRef::from_array_view(([ROWS, K], x.as_slice())).expect("tensor").into())];
    let out = s.run(feed).expect("run");
    let magnitudes = out[CALIBRATION_OUTPUT].try_extract_tensor::<f32>().expect("float").1.to_vec();
    assert_eq!(magnitudes.len(), ROWS * K);
    let channel_max: Vec<f32> = (0..K).map(|j| (0..ROWS).map(|r| magnitudes[r * K + j]).fold(0.0, f32::max)).collect();
    assert!(channel_max[5] > 5.0 * channel_max[0], "{channel_max:?}");

    let fp32 = run(&bytes, &x);
    let error = |int8: &[u8]| -> f32 { fp32.iter().zip(run(int8, &x)).map(|(a, b)| (a - b).abs()).sum() };
    let (plain, _) = quantize(&bytes, &options.clone().with_smoothing(None)).expect("quantize");
    let map = std::collections::HashMap::from([("ln".to_owned(), channel_max)]);
    let (smoothed, _) = quantize(&bytes, &options.with_channel_max(map)).expect("quantize");
    assert!(ops(&smoothed).contains(&"Mul".to_owned()), "the smoothing Mul: {:?}", ops(&smoothed));
    let (e_plain, e_smoothed) = (error(&plain), error(&smoothed));
    assert!(e_smoothed < 0.7 * e_plain, "smoothed error {e_smoothed} against {e_plain} without");
}

/// A Gemm with `transA` that also reads the LayerNorm's output reads it transposed, so the rewrite
/// keeps it in float and smoothing leaves it out: the MatMul beside it is still smoothed (its
/// weight rows, not the Gemm's, set the factors).
#[test]
fn smoothing_leaves_out_a_gemm_that_reads_its_input_transposed() {
    let gamma: Vec<f32> = (0..K).map(|j| if j % 12 == 5 { 40.0 } else { 1.0 }).collect();
    let bytes = model_at(
        17,
        vec![
            node("LayerNormalization", &["x", "gamma"], &["ln"], &[("axis", -1)]),
            node("MatMul", &["ln", "w"], &["y1"], &[]),
            node("Gemm", &["ln", "v"], &["g"], &[("transA", 1)]),
            node("MatMul", &["ln", "g"], &["y2"], &[]),
            node("Add", &["y1", "y2"], &["y"], &[]),
        ],
        vec![
            f32_tensor("gamma", &[K as i64], &gamma),
            f32_tensor("w", &[K as i64, N as i64], &values(16, K * N)),
            f32_tensor("v", &[ROWS as i64, N as i64], &values(17, ROWS * N)),
        ],
        vec![value("x", 1, &[ROWS as i64, K as i64])],
        &[ROWS as i64, N as i64],
    );
    let (int8, report) = quantize(&bytes, &QuantizeOptions::default()).expect("quantize");
    let kept: Vec<&str> = report.kept_fp32.iter().map(|k| k.reason.as_str()).collect();
    assert!(kept.contains(&"Gemm with transA"), "{kept:?}");
    let m = ModelProto::parse_from_bytes(int8.as_slice()).expect("decode");
    let names: Vec<&str> = m.graph.node.iter().filter_map(|n| n.name.as_deref()).collect();
    assert!(names.iter().any(|n| n.ends_with("_smooth")), "the MatMul's input is smoothed: {names:?}");
    let (x, fp32) = (x(), run(&bytes, &x()));
    let got = run(&int8, &x);
    let worst = fp32.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    let largest = fp32.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(worst < 0.05 * largest, "int8 within 5% of the largest output: {worst} of {largest}");
}

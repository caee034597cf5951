//! Finds the operators of an ONNX graph that quantize activations with one scale per tensor
//! ([`per_tensor_activation_ops`]) and how its attention is computed ([`attention`]), without
//! ONNX Runtime: a small reader of the protobuf's wire format, `ModelProto.graph` (field 7),
//! `GraphProto.node` (1), and of each `NodeProto` its `input` (1), `op_type` (4), `attribute`
//! (5) and `domain` (7), of an attribute its subgraph `g` (6).

/// Operators that quantize their float input with one scale for the whole tensor, found at run
/// time: a text's result then depends on the other texts of its batch and on its padding.
const PER_TENSOR_ACTIVATION_OPS: [(&str, &str); 3] = [
    ("", "DynamicQuantizeLinear"),
    ("com.microsoft", "DynamicQuantizeMatMul"),
    ("com.microsoft", "DynamicQuantizeLSTM"),
];

/// The operators of the ONNX file `model` that quantize activations per tensor, each named once
/// (`DynamicQuantizeLinear`, `com.microsoft.DynamicQuantizeMatMul`), with how many nodes use it.
/// Empty for a float graph, for one with per-token scales (`nornir vector quantize`), and for a
/// file this reader does not understand (ONNX Runtime then says what is wrong with it).
pub fn per_tensor_activation_ops(model: &[u8]) -> Vec<(String, usize)> {
    let mut found: Vec<(String, usize)> = Vec::new();
    let Some(graph) = graph_of(model) else { return found };
    for node in repeated(graph, 1) {
        let (domain, op) = op(node);
        if PER_TENSOR_ACTIVATION_OPS.contains(&(domain, op)) {
            let name = if domain.is_empty() { op.to_owned() } else { format!("{domain}.{op}") };
            match found.iter_mut().find(|(n, _)| *n == name) {
                Some((_, count)) => *count += 1,
                None => found.push((name, 1)),
            }
        }
    }
    found
}

/// `ModelProto.graph` of `model`; `None` for a model with none, or any field this reader cannot
/// read (then nothing is said of the file).
fn graph_of(model: &[u8]) -> Option<&[u8]> {
    let mut graph = None;
    for field in fields(model) {
        if let (7, Field::Bytes(g)) = field? {
            graph = Some(g);
        }
    }
    graph
}

/// How the graph `model` computes attention, in a phrase for `doctor`: fused
/// `MultiHeadAttention` layers that leave their mask out of a batch without padding (ONNX
/// Runtime's memory-efficient path on the CPU: never the queries x keys matrix), fused layers
/// that always add a mask or bias (the whole matrix), a decoder's layers that run
/// `GroupQueryAttention` on a batch without padding, or unfused attention (`Softmax` over the
/// whole matrix). Empty for a graph with none of these, or a file this reader does not read.
pub(crate) fn attention(model: &[u8]) -> Attention {
    let mut a = Attention::default();
    let Some(graph) = graph_of(model) else { return a };
    for node in repeated(graph, 1) {
        match op(node) {
            ("com.microsoft", "MultiHeadAttention") if output_ends_with(node, WINDOWED_ATTENTION) => a.windowed += 1,
            ("com.microsoft", "MultiHeadAttention") => a.masked += 1,
            ("com.microsoft", "GroupQueryAttention") => a.grouped += 1,
            ("ai.nornir", "AlibiAttention") => a.alibi_kernel += 1,
            ("ai.nornir", "Attention") => a.kernel += 1,
            ("ai.nornir", "WindowAttention") => a.window_kernel += 1,
            ("", "Loop") if subgraph_nodes(node).any(|n| op(n) == ("com.microsoft", "MultiHeadAttention")) => {
                a.blocked += 1
            }
            ("", "Softmax") => a.softmax += 1,
            ("", "If") => {
                let branches: Vec<&[u8]> = subgraph_nodes(node).collect();
                let attention: Vec<&&[u8]> =
                    branches.iter().filter(|n| op(n) == ("com.microsoft", "MultiHeadAttention")).collect();
                if attention.iter().any(|n| repeated(n, 1).count() < 6) {
                    a.mask_free += 1;
                } else if branches.iter().any(|n| op(n) == ("com.microsoft", "GroupQueryAttention")) {
                    a.grouped_unpadded += 1;
                } else if !attention.is_empty() {
                    a.masked += 1;
                }
            }
            _ => {}
        }
    }
    a
}

/// How many layers of a graph compute attention each way ([`attention`]).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Attention {
    /// `If`s whose branch runs `MultiHeadAttention` without a mask on a batch without padding.
    mask_free: usize,
    /// `If`s whose branch runs `GroupQueryAttention` on a batch without padding.
    grouped_unpadded: usize,
    /// `MultiHeadAttention` with a mask or bias on every batch.
    masked: usize,
    /// `GroupQueryAttention` on every batch.
    grouped: usize,
    /// `Softmax` nodes outside the fused operators.
    softmax: usize,
    /// Sliding-window layers in blocks (their output named as [`WINDOWED_ATTENTION`] says).
    windowed: usize,
    /// `Loop`s over blocks of queries with a `MultiHeadAttention` in their body (ALiBi).
    blocked: usize,
    /// nornir's `AlibiAttention` operator (the converter's `network/alibi.rs`).
    alibi_kernel: usize,
    /// nornir's `Attention` operator (the converter's `network/padded.rs`).
    kernel: usize,
    /// nornir's `WindowAttention` operator (the converter's `network/window.rs`).
    window_kernel: usize,
}

/// What nornir's converter named the output of a sliding-window layer's `MultiHeadAttention`
/// before that layer was its `WindowAttention` operator: queries in blocks against their band.
const WINDOWED_ATTENTION: &str = ".attention.window";

/// The nodes of `node`'s subgraphs (an `If`'s branches, a `Loop`'s body): each attribute's
/// `g` (5, then 6), its nodes (1).
fn subgraph_nodes(node: &[u8]) -> impl Iterator<Item = &[u8]> {
    repeated(node, 5).filter_map(|a| message_field(a, 6)).flat_map(|g| repeated(g, 1))
}

/// Whether node `node` has an output (field 2) ending with `suffix`.
fn output_ends_with(node: &[u8], suffix: &str) -> bool {
    repeated(node, 2).any(|o| o.ends_with(suffix.as_bytes()))
}

impl Attention {
    /// Whether every batch, padded or not, attends in tiles: all the graph's attention is
    /// nornir's kernels (which a CPU session runs) or sliding windows (in blocks either way).
    pub(crate) fn tiled_when_padded(&self) -> bool {
        let whole_matrix = self.masked + self.mask_free + self.grouped + self.grouped_unpadded + self.softmax;
        self.kernel + self.alibi_kernel + self.window_kernel > 0 && whole_matrix + self.blocked == 0
    }

    /// Whether a batch without padding attends without the queries x keys matrix: the graph's
    /// layers leave the mask out of such a batch. Its memory then grows with the tokens, not
    /// their square (the scheduler's attention bound applies to padded batches only).
    pub(crate) fn tiled_when_unpadded(&self) -> bool {
        self.mask_free + self.grouped_unpadded + self.blocked + self.alibi_kernel + self.kernel + self.window_kernel > 0
    }

    /// The phrase for `doctor`; empty for a graph with no attention this reader recognises.
    pub(crate) fn phrase(&self) -> String {
        let &Attention {
            mask_free,
            grouped_unpadded,
            masked,
            grouped,
            softmax,
            windowed,
            blocked,
            alibi_kernel,
            kernel,
            window_kernel,
        } = self;
        // Each way of attending: its layers' count, what they are, and what they do.
        let ways = [
            (
                grouped_unpadded,
                "causal layer",
                "run GroupQueryAttention on a batch without padding (ONNX Runtime's memory-efficient CPU path); a padded batch builds each layer's masked queries x keys matrix",
            ),
            (grouped, "GroupQueryAttention layer", "on every batch"),
            (
                mask_free,
                "MultiHeadAttention layer",
                "leave the mask out of a batch without padding (ONNX Runtime's memory-efficient CPU path); a padded batch builds each layer's masked queries x keys matrix",
            ),
            (
                masked,
                "MultiHeadAttention layer",
                "with a mask or bias on every batch (the whole queries x keys matrix)",
            ),
            (
                windowed,
                "sliding-window layer",
                "attend in blocks of queries against their band of keys (never the whole matrix)",
            ),
            (
                blocked,
                "ALiBi layer",
                "attend one block of queries at a time with its slice of the bias (never the whole queries x keys matrix)",
            ),
            (
                alibi_kernel,
                "ALiBi layer",
                "run nornir's tiled attention kernel on the CPU (a tile of scores at a time, the bias made in the tile, tiles too far away to count left out) and, on a GPU, one block of queries at a time with its slice of the bias (never the whole queries x keys matrix)",
            ),
            (
                kernel,
                "layer",
                "run nornir's tiled attention kernel on the CPU (a tile of scores at a time, padded batch or not) and, on a GPU, MultiHeadAttention without the mask on a batch without padding",
            ),
            (
                window_kernel,
                "sliding-window layer",
                "run nornir's tiled attention kernel on the CPU (only the tiles of keys within the window) and, on a GPU, attend in blocks of queries against their band of keys (never the whole matrix)",
            ),
        ];
        let mut parts: Vec<String> = ways
            .iter()
            .filter(|(n, ..)| *n > 0)
            .map(|(n, what, how)| format!("{n} {what}{} {how}", plural(*n)))
            .collect();
        let fused: usize = ways.iter().map(|(n, ..)| n).sum();
        if softmax > 0 && fused == 0 {
            parts.push(format!("unfused: Softmax over the whole queries x keys matrix in {softmax} places"));
        }
        parts.join("; ")
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The `(domain, op_type)` of a `NodeProto`, `ai.onnx` as "".
fn op(node: &[u8]) -> (&str, &str) {
    let text = |f| message_field(node, f).and_then(|b| std::str::from_utf8(b).ok()).unwrap_or_default();
    let domain = text(7);
    (if domain == "ai.onnx" { "" } else { domain }, text(4))
}

/// The first length-delimited field `number` of a message.
fn message_field(message: &[u8], number: u64) -> Option<&[u8]> {
    repeated(message, number).next()
}

/// Every length-delimited field `number` of a message, in order (up to a malformed one).
fn repeated(message: &[u8], number: u64) -> impl Iterator<Item = &[u8]> {
    fields(message).map_while(|f| f).filter_map(move |(n, f)| match f {
        Field::Bytes(b) if n == number => Some(b),
        _ => None,
    })
}

enum Field<'a> {
    Varint,
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of one protobuf message, in order; `None` for a malformed one, then nothing more.
fn fields(mut buf: &[u8]) -> impl Iterator<Item = Option<(u64, Field<'_>)>> {
    let mut failed = false;
    std::iter::from_fn(move || {
        if buf.is_empty() || failed {
            return None;
        }
        let field = next_field(&mut buf);
        failed = field.is_none();
        Some(field)
    })
}

fn next_field<'a>(buf: &mut &'a [u8]) -> Option<(u64, Field<'a>)> {
    let key = varint(buf)?;
    let value = match key & 7 {
        0 => varint(buf).map(|_| Field::Varint)?,
        1 => take(buf, 8).map(|_| Field::Fixed)?,
        2 => {
            let n = varint(buf)?;
            Field::Bytes(take(buf, usize::try_from(n).ok()?)?)
        }
        5 => take(buf, 4).map(|_| Field::Fixed)?,
        _ => return None,
    };
    Some((key >> 3, value))
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if n > buf.len() {
        return None;
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Some(head)
}

/// Why texts of this model must run one at a time, if they must: the graph quantizes its
/// activations with one scale per tensor (a third-party dynamic-int8 export, or
/// `nornir vector quantize --activations per-tensor`).
pub(crate) fn one_text_per_run(model: &[u8]) -> Option<String> {
    let ops = per_tensor_activation_ops(model);
    if ops.is_empty() {
        return None;
    }
    let list: Vec<String> = ops.iter().map(|(op, n)| format!("{op} x{n}")).collect();
    Some(format!(
        "the graph quantizes activations with one scale per tensor ({}), so a text's vector would depend on the other texts and the padding of its batch; each text runs alone. `nornir vector quantize` of the float32 model writes per-token scales, which batch",
        list.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A protobuf field with a length-delimited value.
    fn bytes_field(number: u64, value: &[u8]) -> Vec<u8> {
        let mut out = vec![u8::try_from(number << 3 | 2).expect("small field number")];
        let mut n = value.len();
        while n >= 0x80 {
            out.push(u8::try_from(n & 0x7f).expect("7 bits") | 0x80);
            n >>= 7;
        }
        out.push(u8::try_from(n).expect("7 bits"));
        out.extend_from_slice(value);
        out
    }

    fn node(op: &str, domain: &str) -> Vec<u8> {
        let mut n = bytes_field(4, op.as_bytes());
        if !domain.is_empty() {
            n.extend(bytes_field(7, domain.as_bytes()));
        }
        bytes_field(1, &n)
    }

    #[test]
    fn counts_the_per_tensor_quantizers_by_name() {
        let mut graph = node("DynamicQuantizeLinear", "");
        graph.extend(node("MatMulInteger", ""));
        graph.extend(node("DynamicQuantizeLinear", "ai.onnx"));
        graph.extend(node("DynamicQuantizeMatMul", "com.microsoft"));
        graph.extend(node("MatMulIntegerToFloat", "com.microsoft"));
        let model = bytes_field(7, &graph);
        assert_eq!(
            per_tensor_activation_ops(&model),
            [("DynamicQuantizeLinear".to_owned(), 2), ("com.microsoft.DynamicQuantizeMatMul".to_owned(), 1)]
        );
    }

    #[test]
    fn a_damaged_file_finds_nothing_without_panicking() {
        let model = bytes_field(7, &node("DynamicQuantizeLinear", ""));
        assert_eq!(per_tensor_activation_ops(&model).len(), 1);
        for cut in 0..model.len() {
            assert!(per_tensor_activation_ops(&model[..cut]).is_empty(), "cut at {cut}");
        }
        assert!(per_tensor_activation_ops(&[0x3b]).is_empty(), "a group wire type");
    }

    /// A `NodeProto` of `op` with `inputs` inputs and the subgraphs `branches` (an `If`'s).
    fn node_with(op: &str, domain: &str, inputs: usize, branches: &[Vec<u8>]) -> Vec<u8> {
        let mut n = bytes_field(4, op.as_bytes());
        n.extend(bytes_field(7, domain.as_bytes()));
        for i in 0..inputs {
            n.extend(bytes_field(1, format!("x{i}").as_bytes()));
        }
        for b in branches {
            n.extend(bytes_field(5, &bytes_field(6, b)));
        }
        bytes_field(1, &n)
    }

    /// The attention line names what the converter writes: an `If` whose branch leaves the mask
    /// out (3 inputs), a fused layer with its mask (6 inputs), and unfused attention.
    #[test]
    fn says_which_layers_leave_the_mask_out() {
        let mha = |inputs| node_with("MultiHeadAttention", "com.microsoft", inputs, &[]);
        let mut expanded = node("Expand", "");
        expanded.extend(mha(6));
        let layer = node_with("If", "", 1, &[mha(3), expanded]);
        let model = bytes_field(7, &[layer.clone(), layer].concat());
        let said = attention(&model).phrase();
        assert!(said.starts_with("2 MultiHeadAttention layers leave the mask out"), "{said}");
        let masked = bytes_field(7, &[mha(6), node("Softmax", "")].concat());
        assert!(
            attention(&masked).phrase().starts_with("1 MultiHeadAttention layer with a mask"),
            "{}",
            attention(&masked).phrase()
        );
        let gqa = node_with("GroupQueryAttention", "com.microsoft", 7, &[]);
        let decoder_layer = node_with("If", "", 1, &[gqa.clone(), node("Softmax", "")]);
        let decoder = bytes_field(7, &[decoder_layer.clone(), decoder_layer, gqa].concat());
        let said = attention(&decoder).phrase();
        assert!(said.starts_with("2 causal layers run GroupQueryAttention on a batch without padding"), "{said}");
        assert!(said.ends_with("; 1 GroupQueryAttention layer on every batch"), "{said}");
        let mut windowed = bytes_field(4, b"MultiHeadAttention");
        windowed.extend(bytes_field(7, b"com.microsoft"));
        windowed.extend(bytes_field(2, b"layers.1.attention.window"));
        let alibi = node_with("Loop", "", 2, &[mha(6)]);
        let blocks = bytes_field(7, &[bytes_field(1, &windowed), alibi].concat());
        let said = attention(&blocks).phrase();
        assert!(said.starts_with("1 sliding-window layer attend in blocks"), "{said}");
        assert!(said.ends_with("1 ALiBi layer attend one block of queries at a time with its slice of the bias (never the whole queries x keys matrix)"), "{said}");
        let kernel =
            bytes_field(7, &[node("AlibiAttention", "ai.nornir"), node("AlibiAttention", "ai.nornir")].concat());
        let said = attention(&kernel).phrase();
        assert!(said.starts_with("2 ALiBi layers run nornir's tiled attention kernel on the CPU"), "{said}");
        assert!(attention(&kernel).tiled_when_unpadded());
        let plain_kernel = bytes_field(7, &node("Attention", "ai.nornir"));
        let said = attention(&plain_kernel).phrase();
        assert!(said.starts_with("1 layer run nornir's tiled attention kernel on the CPU"), "{said}");
        assert!(attention(&plain_kernel).tiled_when_unpadded() && attention(&plain_kernel).tiled_when_padded());
        let modern = bytes_field(7, &[node("Attention", "ai.nornir"), node("WindowAttention", "ai.nornir")].concat());
        let said = attention(&modern).phrase();
        assert!(said.ends_with("; 1 sliding-window layer run nornir's tiled attention kernel on the CPU (only the tiles of keys within the window) and, on a GPU, attend in blocks of queries against their band of keys (never the whole matrix)"), "{said}");
        assert!(attention(&modern).tiled_when_padded());
        let plain = bytes_field(7, &[node("Softmax", ""), node("Softmax", "")].concat());
        assert_eq!(attention(&plain).phrase(), "unfused: Softmax over the whole queries x keys matrix in 2 places");
        assert!(attention(&model).tiled_when_unpadded() && attention(&decoder).tiled_when_unpadded());
        assert!(!attention(&masked).tiled_when_unpadded() && !attention(&plain).tiled_when_unpadded());
        assert!(!attention(&model).tiled_when_padded() && !attention(&plain).tiled_when_padded());
        assert!(attention(&kernel).tiled_when_padded());
        for cut in 0..model.len() {
            let _ = attention(&model[..cut]).phrase();
        }
    }
}

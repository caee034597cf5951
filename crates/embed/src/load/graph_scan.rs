//! Finds the operators of an ONNX graph that quantize activations with one scale per tensor
//! ([`per_tensor_activation_ops`]), without ONNX Runtime: a small reader of the protobuf's wire
//! format, `ModelProto.graph` (field 7), `GraphProto.node` (1), and of each `NodeProto` its
//! `op_type` (4) and `domain` (7).

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
    let mut graph = None;
    for field in fields(model) {
        match field {
            Some((7, Field::Bytes(g))) => graph = Some(g),
            Some(_) => {}
            None => return found,
        }
    }
    for field in fields(graph.unwrap_or_default()) {
        let Some((1, Field::Bytes(node))) = field else { continue };
        let (mut op, mut domain) = ("", "");
        for f in fields(node) {
            match f {
                Some((4, Field::Bytes(o))) => op = std::str::from_utf8(o).unwrap_or_default(),
                Some((7, Field::Bytes(d))) => domain = std::str::from_utf8(d).unwrap_or_default(),
                _ => {}
            }
        }
        let domain = if domain == "ai.onnx" { "" } else { domain };
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
}

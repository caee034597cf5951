//! Weights in an external data file, as ONNX stores models over protobuf's 2 GB (a converted
//! decoder's `model.onnx_data`): read into the graph before the rewrite, and the rewritten graph's
//! large weights written out again when they still pass what one `.onnx` file can hold. The
//! caller reads the file (this crate does no I/O) through [`ReadExternal`].

use crate::QuantizeError;
use crate::onnx::{GraphProto, StringStringEntryProto, TensorProto};
use crate::tensor::{self, EXTERNAL};

/// Reads the bytes of an external data file: `(location, offset, length)`, the location as the
/// tensor names it (relative to the model's folder), `length` `None` for "to the end of the file".
pub type ReadExternal<'a> = dyn FnMut(&str, u64, Option<u64>) -> Result<Vec<u8>, String> + 'a;

/// Past this many bytes of weights a rewritten graph keeps its large tensors in an external data
/// file: protobuf cannot write a message of 2 GiB, and the converter draws the line at the same
/// place.
pub const MAX_INLINE_WEIGHT_BYTES: usize = 1_800_000_000;

/// Tensors this large or larger go to the external data file; smaller ones (norms, shapes, scales)
/// stay in the graph, as the converter writes them.
const EXTERNAL_MIN_BYTES: usize = 1024;

/// ONNX Runtime maps external data with offsets aligned to 4 KiB when it can.
const ALIGN: usize = 4096;

fn entry<'a>(t: &'a TensorProto, key: &str) -> Option<&'a str> {
    t.external_data.iter().find(|e| e.key.as_deref() == Some(key)).and_then(|e| e.value.as_deref())
}

/// Reads every initializer stored in an external data file into its `raw_data`, and returns
/// where each of them was, for [`restore`]. Without a reader (a model given as bytes alone), and
/// for a tensor kept outside elsewhere (a `Constant` node's value), such a tensor is
/// [`QuantizeError::ExternalData`]: the rewritten model could not point at it.
pub(crate) fn inline(g: &mut GraphProto, mut read: Option<&mut ReadExternal<'_>>) -> Result<Outside, QuantizeError> {
    let mut outside = Outside(Vec::new());
    for (i, t) in g.initializer.iter_mut().enumerate().filter(|(_, t)| t.data_location == Some(EXTERNAL)) {
        let name = tensor::name(t).to_owned();
        let Some(read) = read.as_deref_mut() else { return Err(QuantizeError::ExternalData { tensor: name }) };
        let bad = |why: String| QuantizeError::ExternalRead { tensor: name.clone(), why };
        let location = entry(t, "location").ok_or_else(|| bad("names no location".to_owned()))?.to_owned();
        let number = |key: &str| -> Result<Option<u64>, QuantizeError> {
            entry(t, key)
                .map(|v| v.parse::<u64>().map_err(|_| bad(format!("has {key} {v:?}, not a number"))))
                .transpose()
        };
        let (offset, length) = (number("offset")?.unwrap_or(0), number("length")?);
        let bytes =
            read(&location, offset, length).map_err(|why| bad(format!("cannot be read from {location}: {why}")))?;
        t.raw_data = Some(bytes);
        outside.0.push((i, std::mem::take(&mut t.external_data)));
        t.data_location = None;
    }
    let hidden = g.node.iter().flat_map(|n| &n.attribute).filter_map(|a| a.t.as_ref());
    if let Some(t) = hidden.into_iter().find(|t| t.data_location == Some(EXTERNAL)) {
        return Err(QuantizeError::ExternalData { tensor: tensor::name(t).to_owned() });
    }
    Ok(outside)
}

/// The initializers [`inline`] read, by index, with their external data entries.
#[derive(Debug, Default)]
pub(crate) struct Outside(Vec<(usize, Vec<StringStringEntryProto>)>);

impl Outside {
    /// The external data files the initializers were read from, each once.
    pub(crate) fn locations(&self) -> Vec<String> {
        let mut files: Vec<String> = self
            .0
            .iter()
            .filter_map(|(_, entries)| entries.iter().find(|e| e.key.as_deref() == Some("location")))
            .filter_map(|e| e.value.clone())
            .collect();
        files.sort();
        files.dedup();
        files
    }
}

/// Points the initializers [`inline`] read at their external data again, dropping the bytes read
/// (for a graph that is written beside the same data file, as the calibration graph is).
/// Initializers must not have been added or removed in between.
pub(crate) fn restore(g: &mut GraphProto, outside: Outside) {
    for (i, entries) in outside.0 {
        let t = &mut g.initializer[i];
        t.raw_data = None;
        t.external_data = entries;
        t.data_location = Some(EXTERNAL);
    }
}

/// Moves every initializer of at least [`EXTERNAL_MIN_BYTES`] into one data buffer, to be written
/// as `location` beside the model, offsets aligned to 4 KiB. Returns the buffer.
pub(crate) fn externalize(g: &mut GraphProto, location: &str) -> Vec<u8> {
    let mut data = Vec::new();
    for t in &mut g.initializer {
        let Some(raw) = t.raw_data.take_if(|r| r.len() >= EXTERNAL_MIN_BYTES) else { continue };
        data.resize(data.len().next_multiple_of(ALIGN), 0);
        let offset = data.len();
        data.extend_from_slice(&raw);
        let kv = |key: &str, value: String| {
            let mut e = StringStringEntryProto::new();
            e.key = Some(key.to_owned());
            e.value = Some(value);
            e
        };
        t.external_data = vec![
            kv("location", location.to_owned()),
            kv("offset", offset.to_string()),
            kv("length", raw.len().to_string()),
        ];
        t.data_location = Some(EXTERNAL);
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph_with(tensors: Vec<TensorProto>) -> GraphProto {
        let mut g = GraphProto::new();
        g.initializer = tensors;
        g
    }

    #[test]
    fn weights_go_out_aligned_and_come_back_the_same() {
        let big: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
        let small = [1.0f32, 2.0];
        let mut g = graph_with(vec![tensor::new_f32("big", &[10, 100], &big), tensor::new_f32("small", &[2], &small)]);
        let before = g.clone();
        let data = externalize(&mut g, "model.onnx_data");
        assert_eq!(g.initializer[0].data_location, Some(EXTERNAL));
        assert_eq!(entry(&g.initializer[0], "length"), Some("4000"));
        assert_eq!(g.initializer[1].data_location, None, "a small tensor stays in the graph");
        let mut reads = Vec::new();
        inline(
            &mut g,
            Some(&mut |location: &str, offset, length| {
                reads.push((location.to_owned(), offset, length));
                let (start, n) = (offset as usize, length.map_or(data.len() - offset as usize, |l| l as usize));
                Ok(data[start..start + n].to_vec())
            }),
        )
        .expect("inline");
        assert_eq!(reads, [("model.onnx_data".to_owned(), 0, Some(4000))]);
        assert_eq!(g, before);
        let outside = externalize_again(&mut g);
        assert_eq!(outside.locations(), ["model.onnx_data"]);
        restore(&mut g, outside);
        assert_eq!(g.initializer[0].data_location, Some(EXTERNAL), "pointed at the file again");
        assert_eq!(g.initializer[0].raw_data, None);
        assert_eq!(g.initializer[1], before.initializer[1]);
    }

    /// Externalized and read back once more, for the record `restore` takes.
    fn externalize_again(g: &mut GraphProto) -> Outside {
        let data = externalize(g, "model.onnx_data");
        inline(g, Some(&mut |_: &str, offset, length| Ok(data[offset as usize..][..length.unwrap() as usize].to_vec())))
            .expect("inline")
    }

    #[test]
    fn a_tensor_that_cannot_be_read_is_named() {
        let mut t = tensor::new_f32("w", &[1], &[0.0]);
        t.raw_data = None;
        t.data_location = Some(EXTERNAL);
        let mut g = graph_with(vec![t]);
        let e = inline(&mut g, Some(&mut |_: &str, _, _| Err("no such file".to_owned()))).expect_err("no location");
        assert_eq!(
            e.to_string(),
            "tensor \"w\" in external data names no location; check that the model's folder is complete"
        );
    }
}

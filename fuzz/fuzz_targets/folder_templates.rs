//! The late-interaction and reranker files of a model folder: PyLate's
//! `config_sentence_transformers.json` (lengths, prefixes, skiplist) and `pair_template.json`;
//! a value or an error, never a panic or an allocation sized by a length in the file.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = nornir_embed::internals::parse_multi_vector_config(Some(text));
    let _ = nornir_embed::internals::parse_pair_template(text);
    let _ = nornir_embed::internals::parse_quantization(text);
});

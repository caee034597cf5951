//! The model-folder config parsers (modules.json, the pooling config, sentence_bert_config.json,
//! config.json, config_sentence_transformers.json): any text gives a value or an error, never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = nornir_embed::internals::parse_modules(text);
    let _ = nornir_embed::internals::parse_pooling_config(text);
    let _ = nornir_embed::internals::parse_sentence_bert_config(text);
    let _ = nornir_embed::internals::parse_hf_config(text);
    let _ = nornir_embed::internals::parse_prompts(text);
});

//! A static model's `model.safetensors` (Model2Vec: `embeddings`, `mapping`, `weights`) checked
//! against a tokenizer of the size the first two bytes say: a width or an error, never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (vocab, table) = match data {
        [a, b, rest @ ..] => (usize::from(u16::from_le_bytes([*a, *b])), rest),
        _ => return,
    };
    let _ = nornir_embed::internals::check_static_table(table, vocab);
});

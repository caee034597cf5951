//! Any HTTP request body through every POST route's parser (TEI, OpenAI, Cohere, Jina): a
//! request or a 400, never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nornir_server::fuzzing::parse_request_bodies(data);
});

//! Compiles text-embeddings-inference's gRPC API (proto/tei.proto) into tonic's server code, with
//! protox (a protobuf compiler in Rust), so that building needs no `protoc`.

fn main() {
    println!("cargo:rerun-if-changed=proto/tei.proto");
    let descriptors = match protox::compile(["proto/tei.proto"], ["proto"]) {
        Ok(d) => d,
        Err(e) => panic!("proto/tei.proto does not compile: {e}"),
    };
    if let Err(e) = tonic_prost_build::configure().build_client(false).compile_fds(descriptors) {
        panic!("tonic's code for proto/tei.proto: {e}");
    }
}

//! Generates the Rust types for `proto/onnx_subset.proto` with protobuf-codegen's own parser
//! (no `protoc` needed).

fn main() {
    protobuf_codegen::Codegen::new()
        .pure()
        .include("proto")
        .input("proto/onnx_subset.proto")
        .cargo_out_dir("onnx")
        .run_from_script();
}

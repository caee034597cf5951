//! Generates the Rust types for the ONNX messages from the quantizer's `onnx_subset.proto` (one
//! schema for the two crates that write ONNX), with protobuf-codegen's own parser (no `protoc`);
//! nothing without the `build` feature, which alone writes ONNX.

fn main() {
    #[cfg(feature = "build")]
    protobuf_codegen::Codegen::new()
        .pure()
        .include("../quantize/proto")
        .input("../quantize/proto/onnx_subset.proto")
        .cargo_out_dir("onnx")
        .run_from_script();
}

//! Why a conversion did not happen: the crate's one error type, its messages naming the file
//! and what to do. The config reading (`config/`, `families/`) returns it too.

/// Why a conversion did not happen. Every message names the file (and tensor) and what to do;
/// nothing is left in the output folder.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConvertError {
    #[error(
        "{dir} has no config.json: pass the folder of a transformers model (config.json beside model.safetensors or pytorch_model.bin)"
    )]
    NoConfig { dir: String },
    #[error(
        "{dir} has no model.safetensors or model.safetensors.index.json, nor pytorch_model.bin or pytorch_model.bin.index.json: pass a folder with the model's weights"
    )]
    NoWeights { dir: String },
    #[error("{file} {why}")]
    Config { file: String, why: String },
    #[error("cannot convert architecture {architecture}: supported are {supported}")]
    Unsupported { architecture: String, supported: String },
    #[error("{file} {why}")]
    Weights { file: String, why: String },
    #[error("tensor {tensor:?} is not in {files}: the weights do not match config.json's architecture")]
    MissingTensor { tensor: String, files: String },
    #[error(
        "tensor {tensor:?} in {file} has shape {found:?} where config.json implies {expected:?}: the weights and config.json do not belong together"
    )]
    Shape { file: String, tensor: String, found: Vec<usize>, expected: Vec<usize> },
    #[error("tensor {tensor:?} in {file} is of dtype {dtype}: converted are F32, F16, BF16 and F64 weights")]
    Dtype { file: String, tensor: String, dtype: String },
    #[error("{file} {why}")]
    TorchArchive { file: String, why: String },
    #[error("{file}'s pickle {why} (at byte {at}): the file is truncated or damaged")]
    Pickle { file: String, at: usize, why: String },
    #[error(
        "{file}'s pickle has the opcode 0x{opcode:02x} at byte {at}, which torch.save does not write for a state dict: nornir reads only tensors (convert it to safetensors)"
    )]
    UnknownOpcode { file: String, opcode: u8, at: usize },
    #[error(
        "{file}'s pickle names {global}, which is not a tensor: nornir reads only tensors and their storages (convert it to safetensors, or report the module)"
    )]
    PickleGlobal { file: String, global: String },
    #[error("{file} has no {entry}, the storage of tensor {tensor:?}: the archive is incomplete")]
    StorageMissing { file: String, entry: String, tensor: String },
    #[error(
        "tensor {tensor:?} in {file} runs past the end of its storage {entry} ({storage_bytes} bytes): the file is damaged"
    )]
    StorageOverrun { file: String, tensor: String, entry: String, storage_bytes: usize },
    #[error(
        "tensor {tensor:?} in {file} is not contiguous (shape {shape:?}, stride {stride:?}): save it contiguous, or convert it to safetensors"
    )]
    NonContiguous { file: String, tensor: String, shape: Vec<usize>, stride: Vec<usize> },
    #[error("cannot read {file}: {source}")]
    Read { file: String, source: std::io::Error },
    /// The output folder exists and the options do not say to replace it; each surface names its
    /// own way to ask (`--force`, `replace=True`).
    #[error("{path} already exists: choose another output folder, or ask to replace it")]
    OutputExists { path: String },
    /// Half-precision weights were asked for an encoder; they are written for decoders only.
    #[error(
        "{file} names {architecture}, an encoder: {dtype} weights are written for decoders only; convert it in float32 (then quantize it if it is too large)"
    )]
    DtypeForDecodersOnly { file: String, architecture: String, dtype: &'static str },
    #[error("the output folder {path} is the model folder itself: write the converted model to another folder")]
    OutputIsSource { path: String },
    #[error("the folder {path} for the output does not exist: create it first")]
    NoOutputParent { path: String },
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },
    /// Only the conversion (feature `build`) encodes a graph.
    #[cfg(feature = "build")]
    #[error("cannot encode the ONNX graph: {0}")]
    Encode(#[source] protobuf::Error),
}

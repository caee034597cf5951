//! The images an image-and-text dual encoder's (CLIP, SigLIP) calls take; the calls are
//! `image_calls.rs`, the vision graph they run `forward/vision.rs`; its texts are an embedder's.

use std::path::PathBuf;

/// One image of an image call.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ImageInput {
    /// An encoded image's bytes: JPEG, PNG, WebP, or a GIF's first frame.
    Bytes(Vec<u8>),
    /// An image file, read under the byte bound.
    Path(PathBuf),
    /// Decoded 8-bit RGB pixels (a NumPy array's).
    Rgb8 {
        /// Columns.
        width: u32,
        /// Rows.
        height: u32,
        /// Row by row, `width * height * 3` bytes.
        pixels: Vec<u8>,
    },
}

impl ImageInput {
    /// An encoded image's bytes.
    pub fn bytes(bytes: impl Into<Vec<u8>>) -> Self {
        ImageInput::Bytes(bytes.into())
    }

    /// An image file.
    pub fn path(path: impl Into<PathBuf>) -> Self {
        ImageInput::Path(path.into())
    }

    /// Decoded RGB pixels.
    pub fn rgb8(width: u32, height: u32, pixels: Vec<u8>) -> Self {
        ImageInput::Rgb8 { width, height, pixels }
    }
}

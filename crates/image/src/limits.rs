//! The bounds put on untrusted image bytes before any pixel is decoded.

use crate::error::ImageError;

/// The longest side an image may have, whatever its pixel count: JPEG's own limit. It bounds
/// the resize's weight tables (a few bytes per pixel of one side) for a 1-pixel-thin image.
pub const MAX_SIDE: u64 = 65535;

/// How large an image [`crate::ImageProcessor::preprocess`] accepts. The byte bound is checked
/// before anything else, the pixel bound against the size the file's header declares, before
/// decoding; the decoders' own allocation limits are set from both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLimits {
    /// The most bytes of encoded image.
    pub max_bytes: usize,
    /// The most pixels (width x height) the image may declare, and the most the resize step may
    /// produce.
    pub max_pixels: u64,
}

impl Default for ImageLimits {
    /// 32 MiB and 64 megapixels. A 64-megapixel image (a 9248 x 6936 camera photo, larger than
    /// most phones take) decodes to 192 MiB of RGB, with up to twice that while decoding 16-bit
    /// PNG: a bound a server can hold a few of at once. 32 MiB holds such a photo as a
    /// high-quality JPEG, or a large screenshot as PNG; it is also what an HTTP body of one
    /// image can reasonably be.
    fn default() -> Self {
        ImageLimits { max_bytes: 32 << 20, max_pixels: 64_000_000 }
    }
}

impl ImageLimits {
    /// Refuses a `format` image declaring `width` x `height` when that is over
    /// [`Self::max_pixels`], has a side over [`MAX_SIDE`], or is empty.
    pub(crate) fn check_pixels(&self, format: &'static str, width: u64, height: u64) -> Result<(), ImageError> {
        if width == 0 || height == 0 {
            return Err(ImageError::decode(format, format!("the header declares {width}x{height} pixels")));
        }
        match width.checked_mul(height) {
            Some(n) if n <= self.max_pixels && width <= MAX_SIDE && height <= MAX_SIDE => Ok(()),
            _ => Err(ImageError::TooManyPixels { width, height, max: self.max_pixels }),
        }
    }

    /// Refuses a resize to `width` x `height` over [`Self::max_pixels`].
    pub(crate) fn check_resize(&self, width: u64, height: u64) -> Result<(), ImageError> {
        match width.checked_mul(height) {
            Some(n) if n <= self.max_pixels => Ok(()),
            _ => Err(ImageError::ResizeTooLarge { width, height, max: self.max_pixels }),
        }
    }

    /// The allocation limit handed to the decoders: 8 bytes a pixel (RGBA, 16 bits a channel)
    /// plus 16 MiB for their tables and buffers.
    pub(crate) fn max_alloc(&self) -> u64 {
        self.max_pixels.saturating_mul(8).saturating_add(16 << 20)
    }
}

//! [`ImageProcessor`]: the settings of one model's image processor and the steps the slow
//! transformers processor takes with them: resize (Pillow), center crop (numpy slicing, zero
//! padding), rescale (float64 multiply, then float32), normalise (float32).

use std::fmt;
use std::io::Read;
use std::path::Path;

use crate::config::{self, Config, Kind, ResizeTo};
use crate::decode;
use crate::error::ImageError;
use crate::limits::ImageLimits;
use crate::pixels::Rgb8;
use crate::resample::resize_rgb8;

/// The most bytes of `preprocessor_config.json` read; real ones are under 2 KiB.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// The file a model folder keeps its image processor's settings in.
pub const CONFIG_FILE: &str = "preprocessor_config.json";

/// A model's image processor, read from its `preprocessor_config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProcessor {
    config: Config,
}

/// A model's pixel input: `values` holds 3 x `height` x `width` float32s, channels first (R,
/// then G, then B, each row after row), as the processor's `pixel_values[0]`.
#[derive(Debug, Clone, PartialEq)]
pub struct PixelTensor {
    /// Rows.
    pub height: u32,
    /// Columns.
    pub width: u32,
    /// `[3, height, width]`, channels first.
    pub values: Vec<f32>,
}

impl ImageProcessor {
    /// Reads the settings from the text of a `preprocessor_config.json`.
    pub fn from_json(text: &str) -> Result<Self, ImageError> {
        if text.len() > MAX_CONFIG_BYTES {
            return Err(ImageError::ConfigFile(format!("it is over {MAX_CONFIG_BYTES} bytes")));
        }
        Ok(ImageProcessor { config: config::parse(text)? })
    }

    /// Reads `dir/preprocessor_config.json`; `None` when the folder has no such file (a model
    /// without an image processor).
    pub fn from_folder(dir: &Path) -> Result<Option<Self>, ImageError> {
        let path = dir.join(CONFIG_FILE);
        let io = |source| ImageError::Io { path: path.clone(), source };
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        let mut bytes = Vec::new();
        file.take(MAX_CONFIG_BYTES as u64 + 1).read_to_end(&mut bytes).map_err(io)?;
        let text = String::from_utf8(bytes).map_err(|_| ImageError::ConfigFile("it is not UTF-8 text".into()))?;
        Self::from_json(&text).map(Some)
    }

    /// The (height, width) every output has, when the settings fix it: `None` when it follows
    /// the image (a shortest-edge resize without a crop, or neither step).
    pub fn output_size(&self) -> Option<(u32, u32)> {
        match (self.config.crop, self.config.resize) {
            (Some(crop), _) => Some(crop),
            (None, Some((ResizeTo::Exact { height, width }, _))) => Some((height, width)),
            _ => None,
        }
    }

    /// Image bytes (PNG, JPEG, WebP or GIF's first frame) to the model's pixels, bounded by
    /// `limits` before anything is decoded.
    pub fn preprocess(&self, bytes: &[u8], limits: &ImageLimits) -> Result<PixelTensor, ImageError> {
        let image = decode::decode(bytes, limits, self.config.convert_rgb)?;
        self.run(image, limits)
    }

    /// Already-decoded RGB pixels (`width * height * 3` bytes, row after row; a NumPy
    /// `uint8` array of shape `[height, width, 3]`) to the model's pixels. The image and the
    /// resize are bounded by [`ImageLimits::default`]'s pixel count, as decoded images are.
    pub fn preprocess_rgb8(&self, width: u32, height: u32, rgb: &[u8]) -> Result<PixelTensor, ImageError> {
        let len = (width as usize).checked_mul(height as usize).and_then(|n| n.checked_mul(3));
        if width == 0 || height == 0 || len != Some(rgb.len()) {
            return Err(ImageError::BadPixels(format!("{} bytes for a {width}x{height} image", rgb.len())));
        }
        let limits = ImageLimits::default();
        limits.check_pixels("RGB", u64::from(width), u64::from(height))?;
        self.run(Rgb8 { width, height, data: rgb.to_vec() }, &limits)
    }

    /// Resize, crop, rescale, normalise.
    fn run(&self, image: Rgb8, limits: &ImageLimits) -> Result<PixelTensor, ImageError> {
        let image = match self.config.resize {
            Some((to, filter)) => {
                let (height, width) = resize_target(to, image.height, image.width);
                limits.check_resize(u64::from(width), u64::from(height))?;
                let data = resize_rgb8(&image.data, image.width, image.height, width, height, filter)?;
                Rgb8 { width, height, data }
            }
            None => image,
        };
        let image = match self.config.crop {
            Some((height, width)) => center_crop(&image, height, width),
            None => image,
        };
        Ok(self.to_tensor(&image))
    }

    /// Rescale and normalise, channels first. Each channel maps its 256 byte values through a
    /// table computed with the processor's arithmetic.
    fn to_tensor(&self, image: &Rgb8) -> PixelTensor {
        let tables: [[f32; 256]; 3] = std::array::from_fn(|channel| {
            std::array::from_fn(|v| {
                let x = match self.config.rescale {
                    // rescale: image.astype(float64) * scale, then .astype(float32).
                    Some(scale) => (v as f64 * scale) as f32,
                    None => v as f32,
                };
                match self.config.normalize {
                    // normalize: (image - mean) / std, all float32.
                    Some((mean, std)) => (x - mean[channel] as f32) / std[channel] as f32,
                    None => x,
                }
            })
        });
        let plane = image.width as usize * image.height as usize;
        let mut values = vec![0.0f32; plane * 3];
        for (channel, out) in values.chunks_exact_mut(plane.max(1)).enumerate() {
            let table = &tables[channel];
            for (o, px) in out.iter_mut().zip(image.data.chunks_exact(3)) {
                *o = table[usize::from(px[channel])];
            }
        }
        PixelTensor { height: image.height, width: image.width, values }
    }
}

/// The (height, width) `get_resize_output_image_size` gives for an image of `height` x `width`.
fn resize_target(to: ResizeTo, height: u32, width: u32) -> (u32, u32) {
    match to {
        ResizeTo::Exact { height, width } => (height, width),
        ResizeTo::ShortestEdge(n) => {
            let (short, long) = if width <= height { (width, height) } else { (height, width) };
            // int(n * long / short): Python's true division (correctly rounded), truncated.
            let new_long = (f64::from(n) * f64::from(long) / f64::from(short)) as u32;
            if width <= height { (new_long, n) } else { (n, new_long) }
        }
    }
}

/// image_transforms.center_crop: offsets (size - crop) // 2, floored; where the crop is larger
/// than the image the image sits at ceil((crop - size) / 2) in zeros.
fn center_crop(image: &Rgb8, crop_h: u32, crop_w: u32) -> Rgb8 {
    let (h, w) = (i64::from(image.height), i64::from(image.width));
    let (ch, cw) = (i64::from(crop_h), i64::from(crop_w));
    // The crop's top-left corner in image coordinates (negative where it pads).
    let top = (h - ch).div_euclid(2);
    let left = (w - cw).div_euclid(2);
    let mut data = vec![0u8; crop_h as usize * crop_w as usize * 3];
    for y in 0..ch {
        let sy = top + y;
        if !(0..h).contains(&sy) {
            continue;
        }
        // Columns of this output row that fall inside the image.
        let x0 = (-left).clamp(0, cw);
        let x1 = (w - left).clamp(0, cw);
        if x0 >= x1 {
            continue;
        }
        let src = ((sy * w + left + x0) * 3) as usize;
        let dst = ((y * cw + x0) * 3) as usize;
        let n = ((x1 - x0) * 3) as usize;
        data[dst..dst + n].copy_from_slice(&image.data[src..src + n]);
    }
    Rgb8 { width: crop_w, height: crop_h, data }
}

impl fmt::Display for ImageProcessor {
    /// One line: the processor, then each step it takes and its settings.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        write!(f, "{}", c.type_name)?;
        if c.kind == Kind::Clip && c.type_name != "CLIPImageProcessor" {
            write!(f, " (as CLIPImageProcessor)")?;
        }
        match c.resize {
            Some((ResizeTo::ShortestEdge(n), filter)) => write!(f, "; resize shortest edge {n} {}", filter.name())?,
            Some((ResizeTo::Exact { height, width }, filter)) => {
                write!(f, "; resize {height}x{width} {}", filter.name())?
            }
            None => write!(f, "; no resize")?,
        }
        match c.crop {
            Some((h, w)) => write!(f, "; center crop {h}x{w}")?,
            None => write!(f, "; no crop")?,
        }
        match c.rescale {
            Some(s) => write!(f, "; rescale {s}")?,
            None => write!(f, "; no rescale")?,
        }
        match c.normalize {
            Some((m, s)) => write!(f, "; mean {m:?} std {s:?}")?,
            None => write!(f, "; no normalize")?,
        }
        write!(f, "; {}", if c.convert_rgb { "convert to RGB" } else { "RGB images only" })
    }
}

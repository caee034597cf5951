//! [`ImageProcessor`]: the settings of one model's image processor and the steps it takes with
//! them. transformers' slow processors: `convert("RGB")`, resize (Pillow), center crop (numpy
//! slicing, zero padding, offsets floored), rescale (float64 multiply, then float32), normalise
//! (float32). open_clip's eval transform (jina-clip): resize (Pillow, in the image's own mode
//! unless it was converted to RGB first), center crop or pad (torchvision on the Pillow image,
//! offsets rounded half to even), `convert("RGB")`, `ToTensor` (float32 / 255), `Normalize`
//! (float32).

use std::fmt;
use std::io::Read;
use std::path::Path;

use crate::config::{self, Config, Kind, OpenClip, ResizeMode, ResizeTo, Steps};
use crate::decode;
use crate::error::ImageError;
use crate::limits::ImageLimits;
use crate::pixels::{Opened, Rgb8};
use crate::resample::{Resample, resize_rgb8};

/// The most bytes of `preprocessor_config.json` read; real ones are under 2 KiB.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// The file a model folder keeps its image processor's settings in.
pub const CONFIG_FILE: &str = "preprocessor_config.json";

/// A model's image processor, read from its `preprocessor_config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProcessor {
    steps: Steps,
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
        Ok(ImageProcessor { steps: config::parse(text)? })
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
        let c = match &self.steps {
            Steps::Transformers(c) => c,
            Steps::OpenClip(o) => return Some(o.size),
        };
        match (c.crop, c.resize) {
            (Some(crop), _) => Some(crop),
            (None, Some((ResizeTo::Exact { height, width }, _))) => Some((height, width)),
            _ => None,
        }
    }

    /// jina-clip's processor with the image converted to RGB before its steps (`true`, the
    /// default: what jina's `JinaCLIPModel.encode_image` and its sentence-transformers module
    /// hand the processor) or resized and cropped in the mode Pillow opens it in and converted
    /// after (`false`: the processor called on the opened image, as `JinaCLIPImageProcessor`
    /// itself computes it). The two differ only for images Pillow does not open as RGB (palette,
    /// alpha, 1-bit, 16-bit gray, CMYK). transformers' processors keep their own order
    /// (`do_convert_rgb`): for them this changes nothing.
    pub fn with_rgb_first(mut self, rgb_first: bool) -> Self {
        if let Steps::OpenClip(o) = &mut self.steps {
            o.rgb_first = rgb_first;
        }
        self
    }

    /// Image bytes (PNG, JPEG, WebP or GIF's first frame) to the model's pixels, bounded by
    /// `limits` before anything is decoded.
    pub fn preprocess(&self, bytes: &[u8], limits: &ImageLimits) -> Result<PixelTensor, ImageError> {
        match &self.steps {
            Steps::Transformers(c) => transformers(c, decode::decode(bytes, limits, c.convert_rgb)?.into_rgb(), limits),
            Steps::OpenClip(o) => {
                let image = decode::decode(bytes, limits, true)?;
                let image = if o.rgb_first { Opened::from(image.into_rgb()) } else { image };
                open_clip(o, image, limits)
            }
        }
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
        match &self.steps {
            Steps::Transformers(c) => transformers(c, Rgb8 { width, height, data: rgb.to_vec() }, &limits),
            Steps::OpenClip(o) => open_clip(o, Opened::from(Rgb8 { width, height, data: rgb.to_vec() }), &limits),
        }
    }
}

/// transformers' steps: resize, crop, rescale, normalise.
fn transformers(config: &Config, image: Rgb8, limits: &ImageLimits) -> Result<PixelTensor, ImageError> {
    let image = match config.resize {
        Some((to, filter)) => {
            let (height, width) = resize_target(to, image.height, image.width);
            limits.check_resize(u64::from(width), u64::from(height))?;
            let data = resize_rgb8(&image.data, image.width, image.height, width, height, filter)?;
            Rgb8 { width, height, data }
        }
        None => image,
    };
    let image = match config.crop {
        Some((height, width)) => center_crop(&image, height, width),
        None => image,
    };
    // Rescale and normalise with the processor's arithmetic.
    let tables: [[f32; 256]; 3] = std::array::from_fn(|channel| {
        std::array::from_fn(|v| {
            let x = match config.rescale {
                // rescale: image.astype(float64) * scale, then .astype(float32).
                Some(scale) => (v as f64 * scale) as f32,
                None => v as f32,
            };
            match config.normalize {
                // normalize: (image - mean) / std, all float32.
                Some((mean, std)) => (x - mean[channel] as f32) / std[channel] as f32,
                None => x,
            }
        })
    });
    Ok(planes(&image, &tables))
}

/// open_clip's eval transform: resize and crop (or pad) in the mode `image` is in, then
/// `convert("RGB")`, `ToTensor`, `Normalize`.
fn open_clip(o: &OpenClip, image: Opened, limits: &ImageLimits) -> Result<PixelTensor, ImageError> {
    let (crop_h, crop_w) = o.size;
    limits.check_resize(u64::from(crop_w), u64::from(crop_h))?;
    let (height, width, filter) = match o.mode {
        // torchvision's Resize(int): the shortest edge, the other side int(size * long / short),
        // the formula transformers' CLIP uses too.
        ResizeMode::Shortest if crop_h == crop_w => {
            let (h, w) = resize_target(ResizeTo::ShortestEdge(crop_h), image.height, image.width);
            (u64::from(h), u64::from(w), o.filter)
        }
        // open_clip's ResizeKeepRatio(size), built without the interpolation: BICUBIC.
        ResizeMode::Shortest => {
            let (h, w) = keep_ratio(image.height, image.width, o.size, false);
            (h, w, Resample::Bicubic)
        }
        ResizeMode::Squash => (u64::from(crop_h), u64::from(crop_w), o.filter),
        ResizeMode::Longest => {
            let (h, w) = keep_ratio(image.height, image.width, o.size, true);
            (h, w, o.filter)
        }
    };
    if width == 0 || height == 0 {
        return Err(ImageError::ResizeToNothing { width, height });
    }
    limits.check_resize(width, height)?;
    // A pixel limit above 2^32 could let one side past u32: such a side is refused the same way.
    let (Ok(height), Ok(width)) = (u32::try_from(height), u32::try_from(width)) else {
        return Err(ImageError::ResizeTooLarge { width, height, max: limits.max_pixels });
    };
    let image = image.resize(width, height, filter);
    let image = match o.mode {
        ResizeMode::Squash => image,
        // CenterCrop pads with 0, CenterCropOrPad with fill_color (only `longest` can need it).
        ResizeMode::Shortest => center_crop_or_pad(image, crop_h, crop_w, 0),
        ResizeMode::Longest => center_crop_or_pad(image, crop_h, crop_w, o.fill),
    };
    let image = image.into_rgb();
    // ToTensor: float32(v) / 255 (true division in float32); Normalize: (x - mean) / std, float32.
    let tables: [[f32; 256]; 3] = std::array::from_fn(|channel| {
        std::array::from_fn(|v| (v as f32 / 255.0 - o.mean[channel] as f32) / o.std[channel] as f32)
    });
    Ok(planes(&image, &tables))
}

/// open_clip's `ResizeKeepRatio.get_params` without its random factors: with r the larger
/// (`longest`) or smaller of height / target height and width / target width, each side
/// becomes `round(side / r)` (Python's round, half to even).
fn keep_ratio(height: u32, width: u32, (target_h, target_w): (u32, u32), longest: bool) -> (u64, u64) {
    let ratio_h = f64::from(height) / f64::from(target_h);
    let ratio_w = f64::from(width) / f64::from(target_w);
    // max(..) * longest + min(..) * (1 - longest) with longest 1.0 or 0.0 is exactly one of them.
    let ratio = if longest { ratio_h.max(ratio_w) } else { ratio_h.min(ratio_w) };
    let side = |n: u32| (f64::from(n) / ratio).round_ties_even() as u64;
    (side(height), side(width))
}

/// torchvision's `center_crop` and open_clip's `center_crop_or_pad` on a Pillow image: where the
/// crop is larger than the image it is padded first, `(crop - size) // 2` before and the rest
/// after, with `fill` (`ImageOps.expand`); then the crop's corner is
/// `int(round((size - crop) / 2.0))`, Python's round, half to even.
fn center_crop_or_pad(image: Opened, crop_h: u32, crop_w: u32, fill: u8) -> Opened {
    if (image.height, image.width) == (crop_h, crop_w) {
        return image;
    }
    let start = |size: u32, crop: u32| -> i64 {
        let (size, crop) = (i64::from(size), i64::from(crop));
        if crop > size {
            // Padded: the crop is the whole padded side, which begins this far before the image.
            -((crop - size) / 2)
        } else {
            let (half, odd) = ((size - crop) / 2, (size - crop) % 2 == 1);
            // x.5 rounds to the even neighbour.
            if odd && half % 2 == 1 { half + 1 } else { half }
        }
    };
    let (top, left) = (start(image.height, crop_h), start(image.width, crop_w));
    image.window(top, left, crop_h, crop_w, fill)
}

/// The RGB image channels first, each channel's bytes mapped through its table.
fn planes(image: &Rgb8, tables: &[[f32; 256]; 3]) -> PixelTensor {
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
        let c = match &self.steps {
            Steps::Transformers(c) => c,
            Steps::OpenClip(o) => return open_clip_steps(o, f),
        };
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

/// The open_clip transform's line.
fn open_clip_steps(o: &OpenClip, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let (h, w) = o.size;
    write!(f, "{}", o.type_name)?;
    match o.mode {
        ResizeMode::Shortest if h == w => {
            write!(f, "; resize shortest edge {h} {}; center crop {h}x{w} (torchvision rounding)", o.filter.name())?
        }
        ResizeMode::Shortest => write!(
            f,
            "; resize to cover {h}x{w} keeping the ratio {}; center crop {h}x{w} (torchvision rounding)",
            Resample::Bicubic.name()
        )?,
        ResizeMode::Squash => write!(f, "; resize {h}x{w} {}; no crop", o.filter.name())?,
        ResizeMode::Longest => write!(
            f,
            "; resize to fit {h}x{w} keeping the ratio {}; center crop or pad {h}x{w} with {} (torchvision rounding)",
            o.filter.name(),
            o.fill
        )?,
    }
    let order = match o.rgb_first {
        true => "converted to RGB first (jina's encode_image)",
        false => "resized in the image's own mode, then converted to RGB",
    };
    write!(f, "; {order}; divide by 255 in float32; mean {:?} std {:?}", o.mean, o.std)
}

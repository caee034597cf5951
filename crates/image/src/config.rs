//! `preprocessor_config.json` read as transformers 4.x reads it for the slow `CLIPImageProcessor`
//! and `SiglipImageProcessor` (each class's own defaults for missing keys, `size` and
//! `crop_size` through `get_size_dict`), and as jina-clip's `JinaCLIPImageProcessor` reads its
//! keys for open_clip's `image_transform`; every number checked where it is read.

use serde_json::{Map, Value};

use crate::error::{ImageError, short};
use crate::resample::Resample;
use crate::size::{SizeSpec, read_size, side};

/// OpenAI's CLIP mean and std (transformers' `OPENAI_CLIP_MEAN` / `OPENAI_CLIP_STD`).
const OPENAI_CLIP_MEAN: [f64; 3] = [0.48145466, 0.4578275, 0.40821073];
const OPENAI_CLIP_STD: [f64; 3] = [0.26862954, 0.26130258, 0.27577711];
/// transformers' `IMAGENET_STANDARD_MEAN` / `_STD`, SigLIP's defaults.
const STANDARD_HALF: [f64; 3] = [0.5, 0.5, 0.5];

/// Which published processor the settings are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `CLIPImageProcessor` (and the older name `CLIPFeatureExtractor`).
    Clip,
    /// `SiglipImageProcessor`.
    Siglip,
    /// jina-clip's `JinaCLIPImageProcessor`: open_clip's eval `image_transform` (torchvision on
    /// the Pillow image).
    JinaClip,
}

/// The settings, for the family of processor they belong to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Steps {
    /// transformers' CLIP and SigLIP processors.
    Transformers(Config),
    /// open_clip's transform, as jina-clip's processor builds it.
    OpenClip(OpenClip),
}

/// open_clip's `resize_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResizeMode {
    /// Cover the size keeping the ratio, then center crop (torchvision's `Resize` with an int
    /// for a square size, open_clip's `ResizeKeepRatio` for another).
    Shortest,
    /// Fit in the size keeping the ratio (`ResizeKeepRatio(longest=1)`), then center crop or
    /// pad with `fill_color` (`CenterCropOrPad`).
    Longest,
    /// Resize to exactly the size (torchvision's `Resize((h, w))`).
    Squash,
}

/// open_clip's eval `image_transform(size, mean, std, resize_mode, interpolation, fill_color)`:
/// resize and crop (or pad) in the image's own mode, `convert("RGB")`, `ToTensor`, `Normalize`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OpenClip {
    /// The processor type as the file names it.
    pub type_name: String,
    pub mode: ResizeMode,
    /// (height, width) of the output.
    pub size: (u32, u32),
    /// The filter `interpolation` names (`random` is BICUBIC at inference); the non-square
    /// shortest resize always uses BICUBIC, as open_clip builds it.
    pub filter: Resample,
    /// Mean and std, used as float32.
    pub mean: [f64; 3],
    pub std: [f64; 3],
    /// The pad's value for each band, in `Longest` mode.
    pub fill: u8,
    /// Whether the image is converted to RGB before the transform, as jina-clip's own entry
    /// points (`JinaCLIPModel.encode_image`, its sentence-transformers module) convert it; else
    /// the transform resizes and crops the image in the mode it was opened in, as the processor
    /// called on a Pillow image does. Not a config key: [`crate::ImageProcessor::with_rgb_first`].
    pub rgb_first: bool,
}

/// How the resize step picks its output size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResizeTo {
    /// The shorter side becomes this, the longer `int(n * long / short)`.
    ShortestEdge(u32),
    /// Exactly this many rows and columns.
    Exact { height: u32, width: u32 },
}

/// Everything the pipeline does, decided from the config.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Config {
    pub kind: Kind,
    /// The processor type as the file names it.
    pub type_name: String,
    /// The resize step and its filter, when `do_resize`.
    pub resize: Option<(ResizeTo, Resample)>,
    /// (height, width) of the center crop, when CLIP's `do_center_crop`.
    pub crop: Option<(u32, u32)>,
    /// The rescale factor, when `do_rescale`.
    pub rescale: Option<f64>,
    /// Mean and std as the file gives them, when `do_normalize`; they are used as float32.
    pub normalize: Option<([f64; 3], [f64; 3])>,
    /// Whether non-RGB images are converted (else refused).
    pub convert_rgb: bool,
}

/// Reads a config from its JSON text (already bounded in size by the caller).
pub(crate) fn parse(text: &str) -> Result<Steps, ImageError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| ImageError::ConfigFile(format!("not valid JSON: {e}")))?;
    let Value::Object(map) = value else {
        return Err(ImageError::ConfigFile("the top level is not a JSON object".into()));
    };
    let (kind, type_name) = processor_kind(&map)?;
    let (mean_default, std_default) = match kind {
        Kind::Clip => (OPENAI_CLIP_MEAN, OPENAI_CLIP_STD),
        Kind::Siglip => (STANDARD_HALF, STANDARD_HALF),
        Kind::JinaClip => return open_clip(&map, type_name).map(Steps::OpenClip),
    };
    let do_resize = flag(&map, "do_resize", true)?;
    let resize = resize_step(&map, kind, do_resize)?;
    let crop = match kind {
        // SigLIP's processor has no crop step: its crop keys, if any, are never read.
        Kind::Siglip | Kind::JinaClip => None,
        Kind::Clip => crop_step(&map)?,
    };
    let rescale = match flag(&map, "do_rescale", true)? {
        false => None,
        true => Some(rescale_factor(&map)?),
    };
    let normalize = match flag(&map, "do_normalize", true)? {
        false => None,
        true => {
            let mean = channels(&map, "image_mean", mean_default)?;
            let std = channels(&map, "image_std", std_default)?;
            if std.iter().any(|&v| v as f32 == 0.0) {
                return Err(ImageError::config("image_std", "has a zero: every std must be non-zero"));
            }
            Some((mean, std))
        }
    };
    // CLIP's class defaults do_convert_rgb to True; SigLIP's to None, which does not convert.
    let convert_rgb = flag(&map, "do_convert_rgb", kind == Kind::Clip)?;
    Ok(Steps::Transformers(Config { kind, type_name, resize, crop, rescale, normalize, convert_rgb }))
}

/// The processor class, from `image_processor_type` or else `feature_extractor_type`.
fn processor_kind(map: &Map<String, Value>) -> Result<(Kind, String), ImageError> {
    let named = ["image_processor_type", "feature_extractor_type"]
        .into_iter()
        .find_map(|key| map.get(key).filter(|v| !v.is_null()).map(|v| (key, v)));
    let Some((key, value)) = named else {
        return Err(ImageError::ConfigFile(
            "it names no image_processor_type: add \"image_processor_type\": \"CLIPImageProcessor\" or \"SiglipImageProcessor\"".into(),
        ));
    };
    let Some(name) = value.as_str() else {
        return Err(ImageError::config(
            if key == "image_processor_type" { "image_processor_type" } else { "feature_extractor_type" },
            "is not a string: name the processor class",
        ));
    };
    let kind = match name {
        "CLIPImageProcessor" | "CLIPFeatureExtractor" => Kind::Clip,
        "SiglipImageProcessor" => Kind::Siglip,
        "JinaCLIPImageProcessor" => Kind::JinaClip,
        other => return Err(ImageError::UnsupportedProcessor(short(other))),
    };
    Ok((kind, name.to_owned()))
}

/// The resize step: `size` is read (and its keys checked) even when `do_resize` is false, as the
/// processor's constructor does; the resample filter only when resizing.
fn resize_step(
    map: &Map<String, Value>,
    kind: Kind,
    do_resize: bool,
) -> Result<Option<(ResizeTo, Resample)>, ImageError> {
    let size = match present(map, "size") {
        None => match kind {
            Kind::Clip => SizeSpec::ShortestEdge(224),
            Kind::Siglip | Kind::JinaClip => SizeSpec::HeightWidth(224, 224),
        },
        // Both classes read `size` with default_to_square=False: a bare int is a shortest edge.
        Some(value) => read_size(value, "size", false)?,
    };
    let square = kind == Kind::Clip && flag(map, "use_square_size", false)?;
    if !do_resize {
        return Ok(None);
    }
    let to = match (kind, size) {
        // KOSMOS-2's old configs: CLIP's constructor turns a shortest edge into a square.
        (Kind::Clip, SizeSpec::ShortestEdge(n) | SizeSpec::ShortestLongest(n, _)) if square => {
            ResizeTo::Exact { height: n, width: n }
        }
        // CLIP's resize reads only shortest_edge; a longest_edge beside it is ignored.
        (Kind::Clip, SizeSpec::ShortestEdge(n) | SizeSpec::ShortestLongest(n, _)) => ResizeTo::ShortestEdge(n),
        (_, SizeSpec::HeightWidth(height, width)) => ResizeTo::Exact { height, width },
        (Kind::Clip, SizeSpec::LongestEdge(_)) => {
            return Err(ImageError::config(
                "size",
                "has only longest_edge, which CLIP's resize refuses: give shortest_edge or height and width",
            ));
        }
        (Kind::Siglip | Kind::JinaClip, _) => {
            return Err(ImageError::config(
                "size",
                "must have height and width for SiglipImageProcessor, which resizes to exactly that",
            ));
        }
    };
    // A null resample is None, which the processor refuses when resizing: so is it here.
    let resample = match map.get("resample") {
        None => Resample::Bicubic,
        Some(value) => {
            let code = value.as_u64().filter(|c| *c <= 5).ok_or_else(|| {
                ImageError::config(
                    "resample",
                    format!(
                        "is {}: it must be a Pillow filter number 0 to 5 (3 is BICUBIC)",
                        short(&value.to_string())
                    ),
                )
            })?;
            Resample::from_pillow(code as u8).unwrap_or(Resample::Bicubic)
        }
    };
    Ok(Some((to, resample)))
}

/// CLIP's center crop: `crop_size` read with default_to_square=True, applied when
/// `do_center_crop`, and then it must name a height and a width.
fn crop_step(map: &Map<String, Value>) -> Result<Option<(u32, u32)>, ImageError> {
    let crop = match present(map, "crop_size") {
        None => SizeSpec::HeightWidth(224, 224),
        Some(value) => read_size(value, "crop_size", true)?,
    };
    if !flag(map, "do_center_crop", true)? {
        return Ok(None);
    }
    match crop {
        SizeSpec::HeightWidth(height, width) => Ok(Some((height, width))),
        _ => Err(ImageError::config(
            "crop_size",
            "must have height and width (or be one number) when do_center_crop is true",
        )),
    }
}

/// `rescale_factor`, default 1/255 as Python computes it.
fn rescale_factor(map: &Map<String, Value>) -> Result<f64, ImageError> {
    // A null factor is None, which the processor refuses when rescaling: so is it here.
    match map.get("rescale_factor") {
        None => Ok(1.0 / 255.0),
        Some(value) => value.as_f64().filter(|f| f.is_finite()).ok_or_else(|| {
            ImageError::config(
                "rescale_factor",
                format!("is {}: it must be a finite number such as 0.00392156862745098", short(&value.to_string())),
            )
        }),
    }
}

/// `image_mean` or `image_std`: one number for all channels or exactly three, each a finite
/// float32 once cast (numpy casts them to the image's float32 before normalising).
fn channels(map: &Map<String, Value>, key: &'static str, default: [f64; 3]) -> Result<[f64; 3], ImageError> {
    let values = match present(map, key) {
        None => default,
        Some(Value::Array(items)) if items.len() == 3 => {
            let mut out = [0.0; 3];
            for (slot, item) in out.iter_mut().zip(items) {
                *slot = item.as_f64().ok_or_else(|| not_numbers(key))?;
            }
            out
        }
        Some(Value::Array(items)) => {
            return Err(ImageError::config(
                key,
                format!("has {} values: give exactly 3, one per RGB channel", items.len()),
            ));
        }
        Some(value) => [value.as_f64().ok_or_else(|| not_numbers(key))?; 3],
    };
    if values.iter().any(|&v| !(v as f32).is_finite()) {
        return Err(ImageError::config(key, "has a value that is not a finite float32: give ordinary numbers"));
    }
    Ok(values)
}

fn not_numbers(key: &'static str) -> ImageError {
    ImageError::config(key, "must be a number or a list of 3 numbers")
}

/// A `do_*` flag: absent means the class default; null is Python's None, which is false.
fn flag(map: &Map<String, Value>, key: &'static str, default: bool) -> Result<bool, ImageError> {
    match map.get(key) {
        None => Ok(default),
        Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => {
            Err(ImageError::config(key, format!("is {}: it must be true or false", short(&other.to_string()))))
        }
    }
}

/// The value at `key`, JSON null read as absent: the classes replace a `None` size, crop size,
/// mean or std by their default.
fn present<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key).filter(|v| !v.is_null())
}

/// `JinaCLIPImageProcessor(**config)` then open_clip's `image_transform`: the class defaults
/// (224, OpenAI's mean and std, shortest, bicubic, fill 0) for missing keys, and Python's
/// `value or default` for the mean, std, resize mode and interpolation (a null, 0, empty list
/// or empty string is the default). Values open_clip would refuse are refused; `fill_color` is
/// read only where it is used (`longest`).
fn open_clip(map: &Map<String, Value>, type_name: String) -> Result<OpenClip, ImageError> {
    let size = match map.get("size") {
        None => (224, 224),
        Some(value @ Value::Number(_)) => {
            let n = side(value, "size")?;
            (n, n)
        }
        Some(Value::Array(items)) if items.len() == 2 => (side(&items[0], "size")?, side(&items[1], "size")?),
        Some(other) => {
            return Err(ImageError::config(
                "size",
                format!("is {}: give a number or [height, width]", short(&other.to_string())),
            ));
        }
    };
    const MODES: &str = r#""shortest", "longest" or "squash""#;
    let mode = match falsy_or(map, "resize_mode", MODES)? {
        None | Some("shortest") => ResizeMode::Shortest,
        Some("longest") => ResizeMode::Longest,
        Some("squash") => ResizeMode::Squash,
        Some(other) => return Err(not_one_of("resize_mode", &format!("{other:?}"), MODES)),
    };
    const FILTERS: &str = r#""bicubic", "bilinear" or "random""#;
    let filter = match falsy_or(map, "interpolation", FILTERS)? {
        // open_clip: "random is ignored for interpolation_mode, so defaults to BICUBIC for inference".
        None | Some("bicubic" | "random") => Resample::Bicubic,
        Some("bilinear") => Resample::Bilinear,
        Some(other) => return Err(not_one_of("interpolation", &format!("{other:?}"), FILTERS)),
    };
    let mean = mean_or_std(map, "mean", OPENAI_CLIP_MEAN)?;
    let std = mean_or_std(map, "std", OPENAI_CLIP_STD)?;
    if std.iter().any(|&v| v as f32 == 0.0) {
        return Err(ImageError::config("std", "has a zero: every std must be non-zero"));
    }
    let fill = match (mode, map.get("fill_color")) {
        (ResizeMode::Longest, Some(value)) if !value.is_null() => {
            value.as_u64().and_then(|v| u8::try_from(v).ok()).ok_or_else(|| {
                ImageError::config(
                    "fill_color",
                    format!("is {}: it must be a whole number from 0 to 255", short(&value.to_string())),
                )
            })?
        }
        _ => 0,
    };
    Ok(OpenClip { type_name, mode, size, filter, mean, std, fill, rgb_first: true })
}

/// Whether Python reads `value` as false: None, False, 0, an empty string, list or dict.
fn is_falsy(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// A string setting read as `value or default`: `None` for the default, else the string.
fn falsy_or<'a>(map: &'a Map<String, Value>, key: &'static str, accepted: &str) -> Result<Option<&'a str>, ImageError> {
    match map.get(key) {
        None => Ok(None),
        Some(value) if is_falsy(value) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(not_one_of(key, &other.to_string(), accepted)),
    }
}

/// `key` is `shown` (as JSON writes it), not one of the `accepted` values.
fn not_one_of(key: &'static str, shown: &str, accepted: &str) -> ImageError {
    ImageError::config(key, format!("is {}: it must be {accepted}", short(shown)))
}

/// open_clip's `mean = mean or DEFAULT`, a single number standing for all three channels (as a
/// one-item list does, broadcast by `Normalize`); each a finite float32 once cast.
fn mean_or_std(map: &Map<String, Value>, key: &'static str, default: [f64; 3]) -> Result<[f64; 3], ImageError> {
    let number =
        |v: &Value| v.as_f64().ok_or_else(|| ImageError::config(key, "must be a number or a list of 3 numbers"));
    let values = match map.get(key) {
        None => default,
        Some(value) if is_falsy(value) => default,
        Some(Value::Array(items)) if items.len() == 1 => [number(&items[0])?; 3],
        Some(Value::Array(items)) if items.len() == 3 => [number(&items[0])?, number(&items[1])?, number(&items[2])?],
        Some(Value::Array(items)) => {
            return Err(ImageError::config(
                key,
                format!("has {} values: give 3, one per RGB channel (or 1 for all)", items.len()),
            ));
        }
        Some(value) => [number(value)?; 3],
    };
    if values.iter().any(|&v| !(v as f32).is_finite()) {
        return Err(ImageError::config(key, "has a value that is not a finite float32: give ordinary numbers"));
    }
    Ok(values)
}

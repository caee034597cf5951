//! The image calls of a dual encoder's [`Embedder`]: images decoded and preprocessed on the
//! caller's threads (in parallel), run on the vision graph in batches, finished as the call's text
//! vectors are (its `dimensions` cut, normalised as it says), so images and texts land in one
//! space.

use std::io::Read;
use std::path::Path;

use nornir_image::{ImageError, ImageLimits, PixelTensor};

use crate::call::prepare::plan_call;
use crate::embedder::Embedder;
use crate::error::{EmbedError, Result};
use crate::forward::vision::ImageTower;
use crate::kinds::image::ImageInput;
use crate::math::pooling::normalize;
use crate::values::embeddings::Embeddings;
use nornir_options::CallOptions;

/// Images per run of the vision graph.
const IMAGES_PER_RUN: usize = 16;

impl Embedder {
    /// Whether this model embeds images: a dual encoder (CLIP, SigLIP) with its vision graph
    /// (`vision_model.onnx`) beside its text graph.
    pub fn takes_images(&self) -> bool {
        self.images.is_some()
    }

    /// The image processor's settings in one line (`None` for a text-only model): what
    /// `/info` and `doctor` say.
    pub fn image_settings(&self) -> Option<String> {
        self.images.as_ref().map(|t| format!("{} (vision graph {})", t.processor, t.file.display()))
    }

    /// Embeds `images` into the space of this model's text vectors; row i is image i.
    pub fn embed_images(&self, images: &[ImageInput]) -> Result<Embeddings> {
        self.embed_images_with(images, &CallOptions::default())
    }

    /// [`embed_images`](Self::embed_images) with the call's `dimensions` and normalisation
    /// (its prompt and truncation are a text's and do not apply).
    pub fn embed_images_with(&self, images: &[ImageInput], options: &CallOptions) -> Result<Embeddings> {
        let tower = self.images.as_ref().ok_or_else(|| {
            EmbedError::invalid(
                "images",
                "this model embeds text only (no vision_model.onnx beside a text_model.onnx): use an image-and-text \
                 model, such as CLIP or SigLIP converted by `nornir vector convert`",
            )
        })?;
        let plan = plan_call(&self.engine, options)?;
        let width = self.engine.info.model_dimension;
        let pixels = preprocess_all(tower, images)?;
        let mut rows = Vec::with_capacity(images.len() * plan.dim);
        for batch in same_size_runs(&pixels) {
            let flat: Vec<f32> = batch.iter().flat_map(|p| p.values.iter().copied()).collect();
            let out = tower.run(&flat, batch.len(), (batch[0].height, batch[0].width))?;
            for row in out.chunks_exact(width.max(1)) {
                let start = rows.len();
                rows.extend_from_slice(&row[..plan.dim]);
                if plan.normalize {
                    normalize(&mut rows[start..]);
                }
            }
        }
        Ok(Embeddings::from_whole_rows(rows, plan.dim, Vec::new()))
    }
}

/// Up to [`IMAGES_PER_RUN`] neighbouring images of one size at a time (a processor that resizes
/// to a shortest edge without a crop gives images of many sizes).
fn same_size_runs(pixels: &[PixelTensor]) -> Vec<&[PixelTensor]> {
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..=pixels.len() {
        let cut = i == pixels.len()
            || i - start == IMAGES_PER_RUN
            || (pixels[i].height, pixels[i].width) != (pixels[start].height, pixels[start].width);
        if cut {
            runs.push(&pixels[start..i]);
            start = i;
        }
    }
    runs
}

/// Every image preprocessed, on up to as many threads as the machine has; the first image that
/// fails names its index.
fn preprocess_all(tower: &ImageTower, images: &[ImageInput]) -> Result<Vec<PixelTensor>> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from).min(images.len()).max(1);
    let per_thread = images.len().div_ceil(threads).max(1);
    let results: Vec<std::result::Result<PixelTensor, (usize, ImageError)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = images
            .chunks(per_thread)
            .enumerate()
            .map(|(c, chunk)| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .enumerate()
                        .map(|(j, image)| preprocess(tower, image).map_err(|e| (c * per_thread + j, e)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    });
    if results.len() != images.len() {
        return Err(EmbedError::Internal { reason: "preprocessing an image panicked".to_owned() });
    }
    results
        .into_iter()
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|(index, e)| EmbedError::BadImage { index, reason: e.to_string() })
}

fn preprocess(tower: &ImageTower, image: &ImageInput) -> std::result::Result<PixelTensor, ImageError> {
    match image {
        ImageInput::Bytes(bytes) => tower.processor.preprocess(bytes, &tower.limits),
        ImageInput::Path(path) => {
            let bytes = read_bounded(path, &tower.limits)?;
            tower.processor.preprocess(&bytes, &tower.limits)
        }
        ImageInput::Rgb8 { width, height, pixels } => tower.processor.preprocess_rgb8(*width, *height, pixels),
    }
}

/// The file at `path`, refused unread when it is over the byte bound.
fn read_bounded(path: &Path, limits: &ImageLimits) -> std::result::Result<Vec<u8>, ImageError> {
    let io = |source| ImageError::Io { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    if len > limits.max_bytes as u64 {
        return Err(ImageError::TooManyBytes {
            len: usize::try_from(len).unwrap_or(usize::MAX),
            max: limits.max_bytes,
        });
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(limits.max_bytes as u64 + 1).read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}

//! The image calls of a dual encoder's [`Embedder`]: images decoded and preprocessed on the
//! caller's threads (in parallel), then queued as a text call's texts are, an item each, so that
//! admission, the queue's limit, cancellation and the stats apply to them; the workers run them
//! on the vision graph in batches of one size, and the call finishes them as its text vectors are
//! (its `dimensions` cut, normalised as it says), so images and texts land in one space.

use std::io::Read;
use std::path::Path;
use std::sync::atomic::Ordering;

use nornir_image::{ImageError, ImageLimits, PixelTensor};

use crate::call::future::{EmbedFuture, Work};
use crate::call::prepare::{Call, Finish, finish_row, plan_call};
use crate::call::runner::run_call;
use crate::embedder::Embedder;
use crate::engine::Engine;
use crate::error::{EmbedError, Result};
use crate::forward::vision::ImageTower;
use crate::kinds::image::ImageInput;
use crate::schedule::request::{Item, Request};
use crate::values::embeddings::Embeddings;
use nornir_options::CallOptions;

impl Embedder {
    /// Whether this model embeds images: a dual encoder (CLIP, SigLIP) with its vision graph
    /// (`vision_model.onnx`) beside its text graph.
    pub fn takes_images(&self) -> bool {
        self.engine.images.is_some()
    }

    /// The image processor's settings in one line (`None` for a text-only model): what
    /// `/info` and `doctor` say.
    pub fn image_settings(&self) -> Option<String> {
        self.engine.images.as_ref().map(|t| format!("{} (vision graph {})", t.processor, t.file.display()))
    }

    /// Embeds `images` into the space of this model's text vectors; row i is image i.
    pub fn embed_images(&self, images: &[ImageInput]) -> Result<Embeddings> {
        self.embed_images_with(images, &CallOptions::default())
    }

    /// [`embed_images`](Self::embed_images) with the call's `dimensions` and normalisation
    /// (its prompt and truncation are a text's and do not apply). The images are preprocessed on
    /// the caller's threads, then go through the queue as a call's texts do: the call's
    /// `max_wait`, a full queue and its `cancel` apply to them, and the stats count them.
    pub fn embed_images_with(&self, images: &[ImageInput], options: &CallOptions) -> Result<Embeddings> {
        run_call(&self.engine, prepare_images(&self.engine, images, options)?)
    }

    /// [`embed_images`](Self::embed_images) as a future, as [`embed_async`](Self::embed_async)
    /// is: at its first poll the images are preprocessed on the embedder's tokenizing threads (in
    /// parallel from there), then queued; dropping it cancels the call.
    pub fn embed_images_async(&self, images: Vec<ImageInput>) -> EmbedFuture<'_> {
        self.embed_images_with_async(images, &CallOptions::default())
    }

    /// [`embed_images_with`](Self::embed_images_with) as a future, as
    /// [`embed_images_async`](Self::embed_images_async) is.
    pub fn embed_images_with_async(&self, images: Vec<ImageInput>, options: &CallOptions) -> EmbedFuture<'_> {
        let (count, options) = (images.len(), options.clone());
        self.future(Work::prepared(count, move |engine| prepare_images(engine, &images, &options)))
    }
}

/// An image call's images preprocessed into queue items (an image that fails names its index),
/// with the request they fill; a call whose `cancel` handle was used is refused first.
fn prepare_images(engine: &Engine, images: &[ImageInput], options: &CallOptions) -> Result<Call> {
    let tower = engine.images.as_ref().ok_or_else(text_only)?;
    let plan = plan_call(engine, options)?;
    let request = Request::new(images.len(), engine.info.model_dimension);
    if let Some(handle) = &options.cancel
        && !handle.watch(request.watchable())
    {
        engine.counters.cancelled_texts.fetch_add(images.len() as u64, Ordering::Relaxed);
        return Err(EmbedError::Cancelled);
    }
    let pixels = preprocess_all(tower, images)?;
    let items = pixels.into_iter().enumerate().map(|(index, p)| Item::image(p, &request, index)).collect();
    Ok(Call::new(request, items, plan.max_wait, ImageRows { dim: plan.dim, normalize: plan.normalize }))
}

/// An image call's finishing: a row per image, cut to the call's width and normalised if it
/// asks, counted as images.
#[derive(Debug)]
struct ImageRows {
    dim: usize,
    normalize: bool,
}

impl Finish for ImageRows {
    fn finish(self: Box<Self>, engine: &Engine, rows: Vec<f32>) -> Embeddings {
        let width = engine.info.model_dimension.max(1);
        let mut data = Vec::with_capacity(rows.len() / width * self.dim);
        rows.chunks_exact(width).for_each(|raw| finish_row(&mut data, raw, self.dim, self.normalize));
        engine.counters.images.fetch_add((rows.len() / width) as u64, Ordering::Relaxed);
        Embeddings::from_whole_rows(data, self.dim, Vec::new())
    }
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

/// The error of an image call on a model without a vision graph.
fn text_only() -> EmbedError {
    EmbedError::invalid(
        "images",
        "this model embeds text only (no vision_model.onnx beside a text_model.onnx): use an image-and-text \
         model, such as CLIP or SigLIP converted by `nornir vector convert`",
    )
}

/// A dual encoder's image calls, from [`Embedder::image_embedder`]: the model was checked once,
/// when the handle was made, so these calls never meet a model without a vision graph.
#[derive(Debug, Clone, Copy)]
pub struct ImageEmbedder<'a> {
    embedder: &'a Embedder,
}

impl Embedder {
    /// This model's image calls (a CLIP, SigLIP or jina-clip dual encoder with its vision graph);
    /// an error for a model that embeds text only.
    pub fn image_embedder(&self) -> Result<ImageEmbedder<'_>> {
        self.engine.images.as_ref().ok_or_else(text_only)?;
        Ok(ImageEmbedder { embedder: self })
    }
}

impl<'a> ImageEmbedder<'a> {
    /// [`Embedder::embed_images`].
    pub fn embed(&self, images: &[ImageInput]) -> Result<Embeddings> {
        self.embedder.embed_images(images)
    }

    /// [`Embedder::embed_images_with`].
    pub fn embed_with(&self, images: &[ImageInput], options: &CallOptions) -> Result<Embeddings> {
        self.embedder.embed_images_with(images, options)
    }

    /// [`Embedder::embed_images_with_async`].
    pub fn embed_with_async(&self, images: Vec<ImageInput>, options: &CallOptions) -> EmbedFuture<'a> {
        self.embedder.embed_images_with_async(images, options)
    }

    /// The embedder behind it: its text calls embed into the same space.
    pub fn embedder(&self) -> &'a Embedder {
        self.embedder
    }
}

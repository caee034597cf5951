//! A dual encoder's vision graph (`vision_model.onnx`, CLIP and SigLIP): its session, opened
//! beside the text graph's on the same plan and checked by a first run, the folder's image
//! processor (`preprocessor_config.json`, read by `nornir-image`) that feeds it, and one run of
//! preprocessed images.

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use nornir_ep_select::Plan;
use nornir_image::{ImageLimits, ImageProcessor};
use ort::session::Session;
use ort::value::{TensorElementType, TensorRef, ValueType};

use crate::error::{EmbedError, InferenceKind, Result};
use crate::load::runtime::OrtRuntime;
use crate::load::session::{self, SessionConfig, Slot};

/// The vision graph, its session and the processor that feeds it.
#[derive(Debug)]
pub(crate) struct ImageTower {
    pub(crate) slot: RwLock<Slot>,
    pub(crate) processor: ImageProcessor,
    pub(crate) limits: ImageLimits,
    /// The graph's pixel input's name and the output read.
    pub(crate) input: String,
    pub(crate) output: usize,
    pub(crate) file: PathBuf,
}

impl ImageTower {
    /// The vision graph `file` of the folder `dir` on `plan`, with the folder's processor; a
    /// first run of a blank image checks that its vectors are `dim` wide, the text vectors' width.
    pub(crate) fn open(
        dir: &Path,
        file: &Path,
        runtime: &OrtRuntime,
        plan: &Plan,
        intra_threads: usize,
        dim: usize,
    ) -> Result<Self> {
        let err = |reason: String| EmbedError::model(dir, reason);
        let processor = match ImageProcessor::from_folder(dir) {
            Ok(Some(p)) => p,
            Ok(None) => {
                return Err(err(format!(
                    "has {} but no preprocessor_config.json: add the model's image processor config (save_pretrained of its processor)",
                    file.display()
                )));
            }
            Err(e) => return Err(err(format!("preprocessor_config.json: {e}"))),
        };
        // A vision graph calls none of nornir's own kernels.
        let cfg = SessionConfig { model: file, intra_threads, kernel_threads: intra_threads, profile_to: None };
        let (session, report) = session::build(runtime, plan, &cfg)?;
        let (input, output) = vision_io(&session).map_err(|why| err(format!("{}: {why}", file.display())))?;
        let tower = Self {
            slot: RwLock::new(Slot::new(session, &report)),
            processor,
            limits: ImageLimits::default(),
            input,
            output,
            file: file.to_path_buf(),
        };
        let blank = tower.processor.preprocess_rgb8(8, 8, &[0; 8 * 8 * 3]).map_err(|e| err(format!("{e}")))?;
        let rows = tower.run(&blank.values, 1, (blank.height, blank.width))?;
        if rows.len() != dim {
            return Err(err(format!(
                "{} gives image vectors of width {} but the text graph gives {dim}: the two graphs do not belong together",
                file.display(),
                rows.len()
            )));
        }
        Ok(tower)
    }

    /// Runs `count` preprocessed images of one size (`pixels`, each `3 x height x width`):
    /// their vectors, row after row.
    pub(crate) fn run(&self, pixels: &[f32], count: usize, (height, width): (u32, u32)) -> Result<Vec<f32>> {
        let shape = [count, 3, height as usize, width as usize];
        let fail = |e: ort::Error| EmbedError::inference_because(InferenceKind::Runtime, "the vision graph failed", e);
        let input = TensorRef::from_array_view((shape, pixels)).map_err(fail)?;
        let feed = [(self.input.clone(), input.into())];
        let run = |s: &Session| crate::forward::shared_run::run(s, &feed, self.output);
        let shared = self.slot.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let value = if shared.builtin_cpu {
            run(&shared.session)
        } else {
            drop(shared);
            // A GPU session runs one batch at a time (see `shared_run`).
            let exclusive = self.slot.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            run(&exclusive.session)
        }
        .map_err(fail)?;
        let (out_shape, values) = value.try_extract_tensor::<f32>().map_err(fail)?;
        if out_shape.len() != 2 || out_shape[0] as usize != count {
            return Err(EmbedError::inference(
                InferenceKind::OutputShape,
                format!("the vision graph gave shape {out_shape:?} for {count} images; expected [images, width]"),
            ));
        }
        Ok(values.to_vec())
    }
}

/// The vision graph's pixel input (`pixel_values`, else its one float input of rank 4) and its
/// vector output (`image_embeds`, else its first float output of rank 2).
fn vision_io(session: &Session) -> std::result::Result<(String, usize), String> {
    let float_of_rank = |ty: &ValueType, rank: usize| matches!(ty, ValueType::Tensor { ty: TensorElementType::Float32, shape, .. } if shape.len() == rank);
    let inputs = session.inputs();
    let input = inputs
        .iter()
        .find(|i| i.name() == "pixel_values")
        .or_else(|| inputs.iter().find(|i| float_of_rank(i.dtype(), 4)))
        .filter(|i| float_of_rank(i.dtype(), 4))
        .ok_or("it has no float32 pixel input [images, 3, height, width] (pixel_values)")?;
    if inputs.len() != 1 {
        return Err(format!("it takes {} inputs; a vision graph takes the pixels alone", inputs.len()));
    }
    let outputs = session.outputs();
    let output = outputs
        .iter()
        .position(|o| o.name() == "image_embeds" && float_of_rank(o.dtype(), 2))
        .or_else(|| outputs.iter().position(|o| float_of_rank(o.dtype(), 2)))
        .ok_or("it has no float32 output [images, width] (image_embeds)")?;
    Ok((input.name().to_owned(), output))
}

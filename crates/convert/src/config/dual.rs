//! An image-and-text dual encoder (CLIP, SigLIP, jina-clip) as its family describes it: each tower's keys
//! (`text_config`, `vision_config`) laid over the family's published defaults, the text tower read
//! as an encoder, the vision tower's sizes, and how each tower pools and projects. The text tower
//! is the [`Config`] itself; [`Dual`] holds the rest.

use serde_json::Value;

use super::checks::{Check, MAX_WIDTH};
use super::encoder::{Encoder, encoder};
use super::{Claim, Config, Head, Raw};
use crate::ConvertError;

/// The largest image side a vision tower may take (published ones take 224 to 1024).
const MAX_IMAGE_SIDE: usize = 8192;

/// What a dual encoder adds to its text tower's config.
#[derive(Debug, Clone)]
pub(crate) struct Dual {
    pub(crate) text_pool: TextPool,
    /// The text tower's pooled row into the shared space, one layer after the other.
    pub(crate) text_projections: Vec<Projection>,
    /// The vision tower's sizes, names and activation (no vocabulary; its positions are its
    /// patches, and the class token where it has one).
    pub(crate) vision: Config,
    pub(crate) image: ImageInput,
    pub(crate) vision_head: VisionHead,
    /// The width both towers' vectors have.
    pub(crate) dim: usize,
    pub(crate) names: &'static TowerNames,
}

/// A linear layer by its tensor prefix, with or without a bias.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Linear {
    pub(crate) name: &'static str,
    pub(crate) bias: bool,
}

/// A linear layer, the width it gives, and the activation after it (jina-clip's `mlp`
/// projection).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Projection {
    pub(crate) layer: Linear,
    pub(crate) outputs: usize,
    pub(crate) then: Option<super::Activation>,
}

/// Which token a text is pooled at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextPool {
    /// The highest id of the row: CLIP's checkpoints whose `eos_token_id` is the legacy 2, where
    /// the end-of-text token is the vocabulary's last (transformers' `argmax` of the ids).
    HighestId,
    /// The first position holding this id (CLIP with its real `eos_token_id`).
    FirstOf(i64),
    /// The ids padded with `pad` to `length` tokens, then the last position (SigLIP, trained on
    /// texts padded to `max_position_embeddings` and attending to the padding).
    LastOfPadded { length: usize, pad: i64 },
    /// The mean of the real tokens' rows (jina-clip's `mean_pooler`), the tower being an encoder
    /// of its own family (its embeddings, layers and positions) under `TowerNames::text`.
    Mean,
}

/// The pixels a vision tower takes: `channels` x `size` x `size`, cut in `patch`-wide squares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ImageInput {
    pub(crate) size: usize,
    pub(crate) patch: usize,
    pub(crate) channels: usize,
}

impl ImageInput {
    /// Patches per side.
    pub(crate) fn side(&self) -> usize {
        self.size / self.patch
    }
}

/// How the vision tower pools.
#[derive(Debug, Clone, Copy)]
pub(crate) enum VisionHead {
    /// CLIP: a class token before the patches and a norm before the layers; the class token's row
    /// after the post norm, projected.
    ClassToken { projection: Linear },
    /// SigLIP: patches only (the patch embedding has a bias); after the post norm a learned probe
    /// attends over them (`nn.MultiheadAttention`), then a norm and an MLP added to it.
    AttentionPool,
    /// EVA02 (jina-clip): a class token and absolute positions, layers with 2D rotary positions,
    /// then a norm, the class token's row and its projections.
    Eva(Eva),
}

/// An EVA02 vision tower's choices (jina's `eva_model.py`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Eva {
    /// `VisionRotaryEmbeddingFast` on the patches' queries and keys: the grid side it was trained
    /// on (`pt_hw_seq_len`), and whether the image's grid is spread over it (`intp_freq`).
    pub(crate) rotary: Option<EvaRotary>,
    /// A norm inside each block before its output projection (`attn.inner_attn_ln`) and in the
    /// feed-forward before its last layer (`mlp.ffn_ln`).
    pub(crate) sub_norms: bool,
    /// The feed-forward is SwiGLU (`w3(silu(w1 x) * w2 x)`) rather than `fc2(gelu(fc1 x))`.
    pub(crate) swiglu: bool,
    /// The query and value projections' biases (`attn.q_bias`, `attn.v_bias`; the key has none).
    pub(crate) qkv_bias: bool,
    /// Each block's residual branches scaled by `gamma_1` and `gamma_2` (`ls_init_value`).
    pub(crate) layer_scale: bool,
    /// After the class token: `vision_model.head` and then `visual_projection`, where present.
    pub(crate) head: Option<Projection>,
    pub(crate) projection: Option<Projection>,
}

/// See [`Eva::rotary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EvaRotary {
    pub(crate) trained_side: usize,
    pub(crate) interpolate: bool,
}

/// Where each tower's tensors are, beside the layers' names in the tower's [`Config`].
#[derive(Debug)]
pub(crate) struct TowerNames {
    pub(crate) text: &'static str,
    pub(crate) vision: &'static str,
    /// After a tower's prefix.
    pub(crate) token_embedding: &'static str,
    pub(crate) position_embedding: &'static str,
    pub(crate) patch_embedding: &'static str,
    pub(crate) class_embedding: &'static str,
    pub(crate) pre_norm: &'static str,
    pub(crate) post_norm: &'static str,
    /// SigLIP's attention-pooling head, after the vision prefix.
    pub(crate) pool_head: &'static str,
}

/// A dual-encoder family: its towers' defaults (transformers' config classes), the text tower's
/// encoder description, and its pooling and projections.
#[derive(Debug)]
pub(crate) struct DualFamily {
    pub(crate) text: &'static Encoder,
    pub(crate) vision: &'static Encoder,
    /// The keys a tower's config may leave out, as its config class defaults them (JSON objects).
    pub(crate) text_defaults: &'static str,
    pub(crate) vision_defaults: &'static str,
    pub(crate) names: &'static TowerNames,
    /// The text pooling, from the text tower's keys and sizes.
    pub(crate) text_pool: fn(&Raw, &Config) -> TextPool,
    pub(crate) text_projection: Linear,
    pub(crate) vision_head: VisionHead,
    /// Whether the vision tower puts a class token before its patches.
    pub(crate) class_token: bool,
    /// The shared width: `projection_dim` (CLIP), or the text tower's `projection_size` else its
    /// width (SigLIP), as `dim` reads the top-level and the text keys.
    pub(crate) dim: fn(&Raw, &Raw, &Config) -> Option<usize>,
}

/// Reads a dual encoder's config: the text tower as an encoder, then the vision tower.
pub(crate) fn read(claim: Claim<'_>, family: &DualFamily) -> Result<Config, ConvertError> {
    let check = claim.check;
    let text_raw = tower_raw(check, claim.raw.text_config.as_ref(), "text_config", family.text_defaults)?;
    let mut text = encoder(Claim { raw: &text_raw, head: Head::TextTower, ..claim }, family.text)?;
    let vision_raw = tower_raw(check, claim.raw.vision_config.as_ref(), "vision_config", family.vision_defaults)?;
    let image = image_input(check, &vision_raw)?;
    let positions = image.side() * image.side() + usize::from(family.class_token);
    // The vision tower has no vocabulary: its "tokens" are its patches.
    let vision_raw = Raw { vocab_size: Some(1), max_position_embeddings: Some(positions), ..vision_raw };
    let vision = encoder(Claim { raw: &vision_raw, head: Head::Encoder, ..claim }, family.vision)?;
    let dim = (family.dim)(claim.raw, &text_raw, &text).unwrap_or(text.hidden);
    let dim = check.count("projection_dim", dim, 1..=MAX_WIDTH)?;
    if matches!(family.vision_head, VisionHead::AttentionPool) && dim != vision.hidden {
        return Err(check.bad(format!(
            "has a text projection of width {dim} and a vision tower of width {}: the towers' vectors must share one width",
            vision.hidden
        )));
    }
    let text_pool = (family.text_pool)(&text_raw, &text);
    text.dual = Some(Box::new(Dual {
        text_pool,
        text_projections: vec![Projection { layer: family.text_projection, outputs: dim, then: None }],
        vision,
        image,
        vision_head: family.vision_head,
        dim,
        names: family.names,
    }));
    Ok(text)
}

/// A tower's keys: `defaults` overlaid by the config's object `key` (absent: the defaults alone).
pub(crate) fn tower_raw(
    check: Check<'_>,
    tower: Option<&Value>,
    key: &str,
    defaults: &str,
) -> Result<Raw, ConvertError> {
    let mut merged: serde_json::Map<String, Value> = serde_json::from_str(defaults).unwrap_or_default();
    match tower {
        None | Some(Value::Null) => {}
        Some(Value::Object(keys)) => merged.extend(keys.iter().map(|(k, v)| (k.clone(), v.clone()))),
        Some(other) => return Err(check.bad(format!("has {key} {other}, which must be an object: fix the config"))),
    }
    let text = Value::Object(merged).to_string();
    let raw: Raw = serde_json::from_str(&text).map_err(|e| Check { file: check.file }.not_valid::<Raw>(&text, &e))?;
    Ok(raw)
}

/// The vision tower's input: `image_size`, `patch_size` (at most the image) and 3 channels.
pub(crate) fn image_input(check: Check<'_>, raw: &Raw) -> Result<ImageInput, ConvertError> {
    let size = check.need(("vision_config.image_size", raw.image_size), 1..=MAX_IMAGE_SIDE)?;
    let patch = check.need(("vision_config.patch_size", raw.patch_size), 1..=size)?;
    let channels = check.count("vision_config.num_channels", raw.num_channels.unwrap_or(3), 3..=3)?;
    Ok(ImageInput { size, patch, channels })
}

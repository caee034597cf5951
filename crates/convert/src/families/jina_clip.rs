//! jina-clip (`JinaCLIPModel`: jina-clip-v2), an image-and-text dual encoder as jina's
//! `modeling_clip.py` builds it. The text tower is jina-embeddings-v3's XLM-RoBERTa (rotary
//! positions, task LoRA adapters) under `text_model.transformer.`, its config
//! `XLMRobertaFlashConfig`'s defaults overlaid by `hf_model_config_kwargs`, run with the adapter
//! of `default_lora_task` and mean-pooled (`HFTextEncoder`), then `text_model.proj` where its
//! width is not `embed_dim` or `proj_type` is `linear`. The vision tower is EVA02
//! (`network/eva.rs`) from `JinaCLIPVisionConfig`'s keys, then `vision_model.head` where
//! `proj_type` is `linear`. `add_projections` adds `text_projection` and `visual_projection` into
//! `projection_dim`. jina-clip-v1's JinaBERT text tower and the vision tower's `mlp` head are
//! refused.

use serde::Deserialize;
use serde_json::Value;

use super::{Family, Identity, bert, jina_v3};
use crate::ConvertError;
use crate::config::checks::{Check, MAX_LAYERS, MAX_WIDTH};
use crate::config::dual::{Dual, Eva, EvaRotary, Linear, Projection, TextPool, TowerNames, image_input, tower_raw};
use crate::config::encoder::{Encoder, Layout, Sizes, encoder};
use crate::config::names::Names;
use crate::config::{Activation, Claim, Config, FeedForward, Head, Positions, Raw};

pub(super) const FAMILY: Family = Family {
    identity: Identity::dual("jina_clip", 8194),
    model_types: &["jina_clip"],
    display: None,
    architectures: &[("JinaCLIPModel", Head::TextTower)],
    claims: |architecture, _| architecture == "JinaCLIPModel",
    read,
};

/// `XLMRobertaFlashConfig`'s defaults: the text tower's keys `hf_model_config_kwargs` leaves out.
const TEXT_DEFAULTS: &str = r#"{"vocab_size": 250002, "hidden_size": 1024, "num_hidden_layers": 24,
    "num_attention_heads": 16, "intermediate_size": 4096, "hidden_act": "gelu", "max_position_embeddings": 8194,
    "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1, "position_embedding_type": "rotary",
    "rotary_emb_base": 10000.0, "lora_rank": 4, "lora_alpha": 1}"#;

/// `JinaCLIPTextConfig`'s keys that matter here, with its defaults.
#[derive(Deserialize)]
#[serde(default)]
struct TextKeys {
    embed_dim: usize,
    hf_model_name_or_path: String,
    hf_model_config_kwargs: Option<Value>,
    default_lora_task: Option<String>,
    default_instruction_task: Option<String>,
    pooler_type: Option<String>,
    proj_type: Option<String>,
    proj_bias: bool,
}

impl Default for TextKeys {
    fn default() -> Self {
        TextKeys {
            embed_dim: 768,
            hf_model_name_or_path: "jinaai/jina-embeddings-v3".to_owned(),
            hf_model_config_kwargs: None,
            default_lora_task: None,
            default_instruction_task: None,
            pooler_type: None,
            proj_type: None,
            proj_bias: false,
        }
    }
}

/// `JinaCLIPVisionConfig`'s keys, with its defaults.
#[derive(Deserialize)]
#[serde(default)]
struct VisionKeys {
    embed_dim: usize,
    width: usize,
    image_size: usize,
    patch_size: usize,
    layers: usize,
    head_width: usize,
    mlp_ratio: f64,
    ls_init_value: Option<f64>,
    qkv_bias: bool,
    post_norm: bool,
    rope_embeddings: bool,
    pt_hw_seq_len: usize,
    intp_freq: bool,
    naive_swiglu: bool,
    subln: bool,
    proj_type: Option<String>,
}

impl Default for VisionKeys {
    fn default() -> Self {
        VisionKeys {
            embed_dim: 768,
            width: 768,
            image_size: 224,
            patch_size: 16,
            layers: 12,
            head_width: 64,
            mlp_ratio: 4.0,
            ls_init_value: None,
            qkv_bias: true,
            post_norm: false,
            rope_embeddings: false,
            pt_hw_seq_len: 16,
            intp_freq: false,
            naive_swiglu: false,
            subln: false,
            proj_type: None,
        }
    }
}

/// Where jina-clip keeps its towers' tensors (the text tower's names are jina-embeddings-v3's).
const NAMES: TowerNames = TowerNames {
    text: "text_model.transformer.",
    vision: "vision_model.",
    token_embedding: "",
    position_embedding: "pos_embed",
    patch_embedding: "patch_embed.proj",
    class_embedding: "cls_token",
    pre_norm: "",
    post_norm: "norm",
    pool_head: "",
};

/// EVA02's blocks (`blocks.N`); the layers' own names are `network/eva.rs`'s.
const VISION_NAMES: Names = Names { layers: "blocks", final_norm: None, ..bert::NAMES };

const VISION: Encoder = Encoder {
    family: "jina-clip-eva02",
    names: &VISION_NAMES,
    gated_activations: &[],
    pad_token_id: 0,
    type_vocab: 0,
    eps: 1e-6,
    layout: vision_layout,
};

fn vision_layout(sizes: &Sizes<'_>) -> Result<Layout, ConvertError> {
    let mut layout = Layout::new(Positions::Absolute { from_padding: false }, sizes.feed_forward);
    layout.pre_norm = true;
    Ok(layout)
}

fn read(claim: Claim<'_>) -> Result<Config, ConvertError> {
    let check = claim.check;
    let raw = claim.raw;
    let text_keys: TextKeys = keys(check, raw.text_config.as_ref().unwrap_or(&Value::Null), "text_config")?;
    let vision_keys: VisionKeys = keys(check, raw.vision_config.as_ref().unwrap_or(&Value::Null), "vision_config")?;
    let mut text = text_tower(claim, &text_keys)?;
    let (vision, image, eva) = vision_tower(claim, &vision_keys)?;
    let embed_dim = check.count("text_config.embed_dim", text_keys.embed_dim, 1..=MAX_WIDTH)?;
    let vision_dim = check.count("vision_config.embed_dim", vision_keys.embed_dim, 1..=MAX_WIDTH)?;
    // HFTextEncoder: no projection where the width is embed_dim and proj_type is null, a linear
    // one where they differ or it is "linear", else "mlp": linear, GELU, linear, half-way wide.
    let linear = |name, outputs, then| Projection { layer: Linear { name, bias: text_keys.proj_bias }, outputs, then };
    let width = text.hidden;
    let mut text_projections = match (text_keys.proj_type.as_deref(), width == embed_dim) {
        (None, true) => Vec::new(),
        (_, false) | (Some("linear"), true) => vec![linear("text_model.proj", embed_dim, None)],
        (Some("mlp"), true) => vec![
            linear("text_model.proj.0", (width + embed_dim) / 2, Some(Activation::Gelu)),
            linear("text_model.proj.2", embed_dim, None),
        ],
        (Some(other), true) => {
            return Err(check.bad(format!("has text_config.proj_type {other:?}; converted: null, \"linear\", \"mlp\"")));
        }
    };
    let mut eva = eva;
    // JinaCLIPConfig's defaults: no projections, projection_dim 768.
    let dim = if raw.add_projections.unwrap_or(false) {
        let dim = check.count("projection_dim", raw.projection_dim.unwrap_or(768), 1..=MAX_WIDTH)?;
        let layer = |name| Projection { layer: Linear { name, bias: false }, outputs: dim, then: None };
        text_projections.push(layer("text_projection"));
        eva.projection = Some(layer("visual_projection"));
        dim
    } else if embed_dim != vision_dim {
        return Err(check.bad(format!(
            "has text_config.embed_dim {embed_dim} and vision_config.embed_dim {vision_dim} without add_projections: the towers' vectors must share one width"
        )));
    } else {
        embed_dim
    };
    text.dual = Some(Box::new(Dual {
        text_pool: TextPool::Mean,
        text_projections,
        vision,
        image,
        vision_head: crate::config::dual::VisionHead::Eva(eva),
        dim,
        names: &NAMES,
    }));
    Ok(text)
}

/// The text tower: XLM-RoBERTa with rotary positions, run with `default_lora_task`'s adapter.
fn text_tower(claim: Claim<'_>, keys: &TextKeys) -> Result<Config, ConvertError> {
    let check = claim.check;
    if !keys.hf_model_name_or_path.contains("jina-embeddings-v3") && !keys.hf_model_name_or_path.contains("xlm-roberta")
    {
        return Err(check.bad(format!(
            "has a text tower from {:?}; converted is jina-clip-v2's XLM-RoBERTa (jinaai/jina-embeddings-v3): jina-clip-v1's JinaBERT tower is not",
            keys.hf_model_name_or_path
        )));
    }
    match keys.pooler_type.as_deref() {
        None | Some("mean_pooler") => {}
        Some(other) => {
            return Err(check.bad(format!("has text_config.pooler_type {other:?}; converted: \"mean_pooler\"")));
        }
    }
    let raw =
        tower_raw(check, keys.hf_model_config_kwargs.as_ref(), "text_config.hf_model_config_kwargs", TEXT_DEFAULTS)?;
    let mut text = encoder(Claim { raw: &raw, head: Head::TextTower, ..claim }, &jina_v3::ENCODER)?;
    text.family = "jina-clip";
    if let Some(lora) = &mut text.lora {
        lora.fixed_task = match &keys.default_lora_task {
            Some(task) => Some(lora.tasks.iter().position(|t| t == task).ok_or_else(|| {
                check.bad(format!(
                    "has text_config.default_lora_task {task:?}, not one of lora_adaptations {:?}: fix the config",
                    lora.tasks
                ))
            })?),
            None => None,
        };
    }
    // Without a default task HFTextEncoder passes no adapter mask: the plain weights.
    if text.lora.as_ref().is_some_and(|lora| lora.fixed_task.is_none()) {
        text.lora = None;
    }
    if let Some(task) = &keys.default_instruction_task {
        return Err(check.bad(format!(
            "has text_config.default_instruction_task {task:?}: an instruction prefixed to every text is not converted; set it to null and give the prefix as a prompt"
        )));
    }
    Ok(text)
}

/// The vision tower's sizes and EVA02's choices.
fn vision_tower(
    claim: Claim<'_>,
    keys: &VisionKeys,
) -> Result<(Config, crate::config::dual::ImageInput, Eva), ConvertError> {
    let check = claim.check;
    let width = check.count("vision_config.width", keys.width, 1..=MAX_WIDTH)?;
    let head_width = check.count("vision_config.head_width", keys.head_width, 1..=width)?;
    if width % head_width != 0 {
        return Err(check.bad(format!("has vision_config.width {width}, not a multiple of head_width {head_width}")));
    }
    check.count("vision_config.layers", keys.layers, 1..=MAX_LAYERS)?;
    let ratio = keys.mlp_ratio;
    if !(ratio.is_finite() && ratio > 0.0 && ratio * width as f64 <= MAX_WIDTH as f64) {
        return Err(
            check.bad(format!("has vision_config.mlp_ratio {ratio}, which must be above 0 and finite: fix the config"))
        );
    }
    // Block: mlp_hidden_dim = int(dim * mlp_ratio).
    let inter = (width as f64 * ratio) as usize;
    if keys.post_norm {
        return Err(check.bad("has vision_config.post_norm true: EVA02's post-norm blocks are not converted".into()));
    }
    if keys.proj_type.as_deref().is_some_and(|p| p != "linear") {
        return Err(check.bad(format!(
            "has vision_config.proj_type {:?}; converted: null, \"linear\"",
            keys.proj_type.as_deref().unwrap_or_default()
        )));
    }
    let image_keys = serde_json::json!({"image_size": keys.image_size, "patch_size": keys.patch_size});
    let image_raw = tower_raw(check, Some(&image_keys), "vision_config", "{}")?;
    let image = image_input(check, &image_raw)?;
    let side = image.side();
    let rotary = match keys.rope_embeddings {
        false => None,
        true => {
            if head_width % 4 != 0 {
                return Err(check.bad(format!(
                    "has vision_config.head_width {head_width}: rotary positions over rows and columns need a multiple of 4"
                )));
            }
            let trained_side = check.count("vision_config.pt_hw_seq_len", keys.pt_hw_seq_len, 1..=8192)?;
            if !keys.intp_freq && trained_side != side {
                return Err(check.bad(format!(
                    "has vision_config.pt_hw_seq_len {trained_side} without intp_freq, but its images are {side} patches a side: set intp_freq or pt_hw_seq_len {side}"
                )));
            }
            Some(EvaRotary { trained_side, interpolate: keys.intp_freq })
        }
    };
    let raw = Raw {
        hidden_size: Some(width),
        num_hidden_layers: Some(keys.layers),
        num_attention_heads: Some(width / head_width),
        intermediate_size: Some(inter.max(1)),
        vocab_size: Some(1),
        max_position_embeddings: Some(side * side + 1),
        hidden_act: Some(if keys.naive_swiglu { "silu" } else { "gelu" }.to_owned()),
        layer_norm_eps: Some(1e-6),
        ..Raw::default()
    };
    let mut vision = encoder(Claim { raw: &raw, head: Head::Encoder, ..claim }, &VISION)?;
    if keys.naive_swiglu {
        vision.feed_forward = FeedForward::Plain;
    }
    let embed_dim = keys.embed_dim;
    let head = match keys.proj_type.as_deref() {
        Some(_) => Some(Projection {
            layer: Linear { name: "vision_model.head", bias: keys.qkv_bias },
            outputs: embed_dim,
            then: None,
        }),
        None if embed_dim == width => None,
        None => {
            return Err(check.bad(format!(
                "has vision_config.embed_dim {embed_dim} and width {width} with proj_type null: EVAVisionTransformer has no head then; set proj_type \"linear\""
            )));
        }
    };
    let eva = Eva {
        rotary,
        sub_norms: keys.subln,
        swiglu: keys.naive_swiglu,
        qkv_bias: keys.qkv_bias,
        layer_scale: keys.ls_init_value.is_some_and(|v| v > 0.0),
        head,
        projection: None,
    };
    Ok((vision, image, eva))
}

/// A tower's or the top level's keys read as `T` (its class's defaults for those left out).
fn keys<T: for<'de> Deserialize<'de> + Default>(check: Check<'_>, value: &Value, at: &str) -> Result<T, ConvertError> {
    match value {
        Value::Null => Ok(T::default()),
        Value::Object(_) => serde_json::from_value(value.clone())
            .map_err(|e| check.bad(format!("has {at} keys that do not read ({e}): fix the config"))),
        other => Err(check.bad(format!("has {at} {other}, which must be an object: fix the config"))),
    }
}

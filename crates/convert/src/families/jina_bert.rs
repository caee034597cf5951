//! JinaBERT v2 (jina-embeddings-v2-*): BERT with ALiBi instead of a position table and a gated
//! GELU (or ReLU) feed-forward; the code variant (jina-embeddings-v2-base-code) adds query and
//! key norms, a second norm before its own feed-forward. `BertModel` with
//! `position_embedding_type: alibi` is JinaBERT too.

use super::{Family, Identity, bert};
use crate::ConvertError;
use crate::config::encoder::{Encoder, Layout, Sizes, encoder};
use crate::config::names::{Gated, Mlp, Names, QkNorms};
use crate::config::{Activation, FeedForward, Head, Positions};

pub(super) const FAMILY: Family = Family {
    identity: Identity::encoder("JinaBERT v2 (ALiBi)"),
    model_types: &[],
    display: Some("JinaBERT v2"),
    architectures: &[("JinaBertModel", Head::Encoder), ("JinaBertForMaskedLM", Head::MaskedLm)],
    claims: |architecture, raw| {
        architecture.starts_with("JinaBert")
            || architecture.starts_with("Bert") && raw.position_embedding_type.as_deref() == Some("alibi")
    },
    read: |claim| encoder(claim, &ENCODER),
};

const ENCODER: Encoder = Encoder {
    family: "jina-bert",
    names: &Names {
        mlp: Mlp {
            plain: "mlp.fc1",
            gated: Gated::Fused { weight: "mlp.gated_layers", activated_first: None },
            down: "mlp.wo",
            norm: "mlp.layernorm",
        },
        // The code variant's GLU activates its second half.
        qk_norms: Some(QkNorms {
            q: "attention.self.layer_norm_q",
            k: "attention.self.layer_norm_k",
            again: "layer_norm_1",
            mlp: Mlp {
                plain: "mlp.fc1",
                gated: Gated::Fused { weight: "mlp.up_gated_layer", activated_first: Some(false) },
                down: "mlp.down_layer",
                norm: "layer_norm_2",
            },
        }),
        ..bert::NAMES
    },
    gated_activations: &[],
    pad_token_id: 0,
    type_vocab: 2,
    eps: 1e-12,
    layout,
};

/// ALiBi, its gated feed-forward.
fn layout(sizes: &Sizes<'_>) -> Result<Layout, ConvertError> {
    let kind = sizes.positions_kind;
    if kind != "alibi" {
        return Err(sizes.unsupported(format!("JinaBERT with position_embedding_type {kind:?} (not \"alibi\")")));
    }
    // v2's GLU activates its first half; the code variant's (`up_gated_layer`) its second, which
    // its names say.
    let feed_forward = match sizes.raw().feed_forward_type.as_deref().unwrap_or("geglu") {
        "geglu" => FeedForward::Gated { activated_first: true, activation: Activation::Gelu },
        "reglu" => FeedForward::Gated { activated_first: true, activation: Activation::Relu },
        other => {
            return Err(sizes.unsupported(format!("JinaBERT feed_forward_type {other:?} (converted: geglu, reglu)")));
        }
    };
    let mut layout = Layout::new(Positions::Alibi, feed_forward);
    layout.biases.mlp_in = false;
    Ok(layout)
}

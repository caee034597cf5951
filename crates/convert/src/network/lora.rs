//! jina-embeddings-v3's task adapters (LoRA): each adapted weight's low-rank update for the task
//! the `task_id` input chooses, read from the checkpoint's `parametrizations.weight.0.lora_A` and
//! `lora_B`.

use super::{Net, TASK_ID};
use crate::ConvertError;
use crate::graph::Attr;

/// One layer's task adapters as the checkpoint stores them, and their scaling `alpha / rank`.
pub(super) struct Adapters {
    pub(super) a_name: String,
    pub(super) a: Vec<f32>,
    pub(super) b: Vec<f32>,
    pub(super) tasks: usize,
    pub(super) rank: usize,
    pub(super) scaling: f64,
}

impl Net<'_, '_> {
    /// `prefix`'s task adapters where the checkpoint has them (jina-embeddings-v3's
    /// `parametrizations.weight.0.lora_A` and `lora_B`), read with the shapes `shapes(tasks, rank)`
    /// gives: a linear layer stores `[tasks, rank, in]` and `[tasks, out, rank]`, an embedding
    /// `[tasks, rows, rank]` and `[tasks, rank, width]`.
    pub(super) fn adapters(
        &self,
        prefix: &str,
        shapes: impl FnOnce(usize, usize) -> ([usize; 3], [usize; 3]),
    ) -> Result<Option<Adapters>, ConvertError> {
        let Some(lora) = &self.c.lora else { return Ok(None) };
        let a_name = format!("{prefix}.parametrizations.weight.0.lora_A");
        if !self.t.has(&a_name) {
            return Ok(None);
        }
        let (tasks, rank) = (lora.tasks.len(), lora.rank);
        let (a_shape, b_shape) = shapes(tasks, rank);
        Ok(Some(Adapters {
            a: self.t.get(&a_name, &a_shape)?,
            b: self.t.get(&format!("{prefix}.parametrizations.weight.0.lora_B"), &b_shape)?,
            a_name,
            tasks,
            rank,
            scaling: lora.alpha / rank as f64,
        }))
    }

    /// `x Aₜᵀ Bₜᵀ · alpha / rank` for the task `task_id` chooses, where `prefix` has a LoRA
    /// parametrization (`lora_A` `[tasks, rank, in]`, `lora_B` `[tasks, out, rank]`). `x Aₜᵀ` is
    /// computed once per input and layer: the row ranges of one fused weight (query, key, value)
    /// share it.
    pub(super) fn lora_update(
        &mut self,
        x: &str,
        prefix: &str,
        inputs: usize,
        outputs: usize,
        rows: std::ops::Range<usize>,
    ) -> Result<Option<String>, ConvertError> {
        let Some(ad) = self.adapters(prefix, |tasks, rank| ([tasks, rank, inputs], [tasks, outputs, rank]))? else {
            return Ok(None);
        };
        let (tasks, rank) = (ad.tasks, ad.rank);
        let scaling = ad.scaling as f32;
        let key = format!("{x}|{prefix}");
        let low = match self.lora_low.get(&key) {
            Some(low) => low.clone(),
            None => {
                // Aᵀ per task [tasks, in, rank].
                let mut a_t = vec![0f32; tasks * inputs * rank];
                for t in 0..tasks {
                    for r in 0..rank {
                        for i in 0..inputs {
                            a_t[(t * inputs + i) * rank + r] = ad.a[(t * rank + r) * inputs + i];
                        }
                    }
                }
                let a_t = self.g.f32(&format!("{prefix}.lora_a_t"), &[tasks, inputs, rank], a_t);
                let a_task = self.g.node("Gather", "", &[&a_t, TASK_ID], &[("axis", Attr::Int(0))], None);
                let low = self.g.op("MatMul", &[x, &a_task]);
                self.lora_low.insert(key, low.clone());
                low
            }
        };
        // Bᵀ's rows in `rows`, scaled, [tasks, rank, n].
        let n = rows.len();
        let mut b_t = vec![0f32; tasks * rank * n];
        for t in 0..tasks {
            for (o, row) in rows.clone().enumerate() {
                for r in 0..rank {
                    b_t[(t * rank + r) * n + o] = ad.b[(t * outputs + row) * rank + r] * scaling;
                }
            }
        }
        let b_t = self.g.f32(&format!("{prefix}.lora_b_t"), &[tasks, rank, n], b_t);
        let b_task = self.g.node("Gather", "", &[&b_t, TASK_ID], &[("axis", Attr::Int(0))], None);
        Ok(Some(self.g.op("MatMul", &[&low, &b_task])))
    }
}

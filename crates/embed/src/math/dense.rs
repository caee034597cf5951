//! sentence-transformers' `Dense` modules: `activation(W x + b)` on each pooled vector, one
//! layer after another, before any normalisation (as `modules.json` orders them).

/// The activations a `Dense` module may name (its `activation_function`, a torch class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Tanh,
    Identity,
    Relu,
    /// torch's `nn.GELU()`, the exact (erf) form.
    Gelu,
    Sigmoid,
}

impl Activation {
    /// The activation of a torch class name (`torch.nn.modules.activation.Tanh`); `None`:
    /// sentence-transformers' default, Tanh. Any other class is an error naming it.
    pub fn from_torch(name: Option<&str>) -> Result<Self, String> {
        let Some(name) = name else { return Ok(Self::Tanh) };
        Ok(match name.rsplit('.').next().unwrap_or_default() {
            "Tanh" => Self::Tanh,
            "Identity" => Self::Identity,
            "ReLU" => Self::Relu,
            "GELU" => Self::Gelu,
            "Sigmoid" => Self::Sigmoid,
            _ => {
                return Err(format!(
                    "activation_function {name:?} is not one nornir applies (Tanh, Identity, ReLU, GELU, Sigmoid)"
                ));
            }
        })
    }

    fn apply(self, x: f32) -> f32 {
        match self {
            Self::Tanh => x.tanh(),
            Self::Identity => x,
            Self::Relu => x.max(0.0),
            Self::Gelu => (0.5 * f64::from(x) * erfc(-f64::from(x) / std::f64::consts::SQRT_2)) as f32,
            Self::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        }
    }
}

/// The complementary error function (Numerical Recipes' `erfcc`, fractional error under 1.2e-7
/// everywhere), for GELU: std has no stable `erf`.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// One `Dense` module's weights: `weight` is `[out_features, in_features]`, row-major, as
/// torch's `nn.Linear` keeps it.
#[derive(Debug, Clone)]
pub struct DenseLayer {
    pub in_features: usize,
    pub out_features: usize,
    pub weight: Vec<f32>,
    /// Zeros when the module has no bias.
    pub bias: Vec<f32>,
    pub activation: Activation,
}

impl DenseLayer {
    /// `activation(weight · x + bias)` into `out`. It runs on every token of a late-interaction
    /// model, so the sums are float32 in eight lanes (see [`dot`]).
    pub(crate) fn apply(&self, x: &[f32], out: &mut Vec<f32>) {
        out.clear();
        out.extend(
            self.weight
                .chunks_exact(self.in_features)
                .zip(&self.bias)
                .map(|(row, b)| self.activation.apply(dot(row, x) + b)),
        );
    }
}

/// `a · b` in eight float32 partial sums (which the compiler vectorises), added in float64 at
/// the end: within ~1e-6 relative of a float64 sum for the widths of real models.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8.remainder().iter().zip(b8.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a8.zip(b8) {
        for k in 0..8 {
            lanes[k] += x[k] * y[k];
        }
    }
    (lanes.iter().map(|&l| f64::from(l)).sum::<f64>() + f64::from(tail)) as f32
}

/// The `Dense` modules of an embedder in order (empty: none, or its graph applies them).
/// Their widths chain (each layer's input is the one before's output), checked at load.
#[derive(Debug, Clone, Default)]
pub struct DenseHead {
    layers: Vec<DenseLayer>,
}

impl DenseHead {
    /// The layers, whose widths the loader checked to chain.
    pub(crate) fn new(layers: Vec<DenseLayer>) -> Self {
        debug_assert!(layers.windows(2).all(|w| w[0].out_features == w[1].in_features));
        Self { layers }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The width it takes (`None`: no layers).
    pub(crate) fn in_features(&self) -> Option<usize> {
        self.layers.first().map(|l| l.in_features)
    }

    /// The width it gives (`None`: no layers).
    pub(crate) fn out_features(&self) -> Option<usize> {
        self.layers.last().map(|l| l.out_features)
    }

    /// Every layer on the pooled vector `x` (of `in_features`); the result lives in `scratch`
    /// (empty when there are no layers).
    pub(crate) fn apply<'a>(&self, x: &[f32], scratch: &'a mut [Vec<f32>; 2]) -> &'a [f32] {
        let [out, before] = scratch;
        for (i, layer) in self.layers.iter().enumerate() {
            if i == 0 {
                layer.apply(x, out);
            } else {
                std::mem::swap(out, before);
                layer.apply(before, out);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_by_torch_name() {
        assert_eq!(Activation::from_torch(Some("torch.nn.modules.activation.Tanh")), Ok(Activation::Tanh));
        assert_eq!(Activation::from_torch(Some("torch.nn.modules.linear.Identity")), Ok(Activation::Identity));
        assert_eq!(Activation::from_torch(None), Ok(Activation::Tanh));
        let e = Activation::from_torch(Some("torch.nn.modules.activation.Softplus")).unwrap_err();
        assert!(e.contains("torch.nn.modules.activation.Softplus"), "{e}");
        // torch.nn.GELU()(x) and sigmoid at a few points.
        for (x, gelu) in
            [(-3.0f32, -0.004_049_7), (-0.5, -0.154_268_8), (0.0, 0.0), (1.0, 0.841_344_7), (2.5, 2.484_475_8)]
        {
            assert!((Activation::Gelu.apply(x) - gelu).abs() < 1e-6, "gelu({x})");
        }
        assert!((Activation::Sigmoid.apply(0.0) - 0.5).abs() < 1e-7);
        assert_eq!(Activation::Relu.apply(-2.0), 0.0);
    }

    #[test]
    fn layers_apply_in_order() {
        // [1, 2] -> identity(W1 x) = [3, -1, 2] -> relu(W2 y + b2) = [relu(-3), 3 + 1 + 3] = [0, 7]
        let first = DenseLayer {
            in_features: 2,
            out_features: 3,
            weight: vec![1.0, 1.0, 1.0, -1.0, 0.0, 1.0],
            bias: vec![0.0, 0.0, 0.0],
            activation: Activation::Identity,
        };
        let second = DenseLayer {
            in_features: 3,
            out_features: 2,
            weight: vec![-1.0, 0.0, 0.0, 1.0, -1.0, 0.0],
            bias: vec![0.0, 3.0],
            activation: Activation::Relu,
        };
        let head = DenseHead::new(vec![first, second]);
        let mut scratch = Default::default();
        assert_eq!(head.apply(&[1.0, 2.0], &mut scratch), &[0.0, 7.0]);
        assert_eq!((head.in_features(), head.out_features()), (Some(2), Some(2)));
    }
}

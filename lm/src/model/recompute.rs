//! Activation recomputation (gradient checkpointing) per decoder layer.
//!
//! [`CausalLm::forward_layer_inputs`] runs the decoder layers without keeping
//! their graphs: only each layer's input `x_l` survives (detached), and the
//! last layer's output is handed back as a [`Var`] ([`LayerInputs::top`]) so
//! that the caller's loss (final norm, head, log-probs) can be differentiated
//! down to it. [`CausalLm::backward_layers`] then walks the layers from the last
//! to the first: it recomputes layer `l` from `x_l` with a graph, backpropagates
//! `sum(out * grad_out)` (the vector-Jacobian product with the incoming
//! gradient), hands the layer's weight gradients to the caller and passes the
//! gradient of `x_l` down; the embedding's gradient comes last from
//! `sum(embed(tokens) * grad_x0)`. Only one layer's activations are alive at a
//! time, at the price of a second forward pass through the layers.

use super::cache::{visibility, Positions};
use super::rope::RopeTables;
use super::{ops, CausalLm};
use crate::error::{Error, Result};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use kernels::attention::Visibility;
use std::sync::Arc;
use serde::{Deserialize, Serialize};

/// How the training backward pass obtains the decoder layers' activations
/// (`[train] recompute` in a run config).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recompute {
    /// `off`: keep every activation of every layer from the forward pass
    /// (one forward; memory grows with layers x tokens).
    #[default]
    Off,
    /// `per_layer`: keep only each decoder layer's input and recompute the
    /// layer in the backward pass (one extra forward through the layers; the
    /// activations of a single layer are alive at a time).
    PerLayer,
}

impl Recompute {
    /// True for [`Recompute::Off`] (lets configs omit the default).
    pub fn is_off(&self) -> bool {
        *self == Recompute::Off
    }
}

/// What [`CausalLm::forward_layer_inputs`] keeps: the tokens, each decoder
/// layer's (detached) input, the rope tables and attention visibility of the pass, and the
/// last layer's output as a [`Var`].
pub struct LayerInputs {
    tokens: Tensor,
    batch: usize,
    len: usize,
    inputs: Vec<Tensor>,
    rope: RopeTables,
    vis: Arc<Visibility>,
    top: Var,
}

impl LayerInputs {
    /// The last decoder layer's output `[b, t, hidden]` before the final
    /// norm; differentiate the loss with respect to it and pass that
    /// gradient to [`CausalLm::backward_layers`].
    pub fn top(&self) -> &Var {
        &self.top
    }
}

impl CausalLm {
    /// The final RMSNorm (what [`CausalLm::forward`] applies after the layers).
    pub fn final_norm(&self, x: &Tensor) -> Result<Tensor> {
        Ok(crate::profile::op(crate::profile::Phase::NormRopeElementwise, [x], |[x]| ops::rms_norm(&x, &self.norm, self.cfg.rms_norm_eps))?)
    }

    /// Forward through the embedding and the decoder layers for `tokens`
    /// `[b, t]` (no KV cache), keeping only each layer's input. No graph
    /// survives the call: `self.final_norm(out.top().as_tensor())` equals
    /// [`CausalLm::forward`]'s result in value.
    pub fn forward_layer_inputs(&self, tokens: &Tensor, positions: &Positions) -> Result<LayerInputs> {
        let (b, t) = tokens.dims2()?;
        if positions.batch != b || positions.len != t {
            return Err(Error::invalid(
                "forward_layer_inputs",
                format!("positions are {}x{}, tokens are {b}x{t}", positions.batch, positions.len),
            ));
        }
        let device = tokens.device();
        let keys: Vec<Vec<i64>> = (0..b).map(|r| positions.row(r).to_vec()).collect();
        let vis = visibility(positions, &keys)?;
        let rope = RopeTables::new(&positions.data, b, t, &self.inv_freq, self.dtype(), device)?;
        let tokens = tokens.flatten_all()?;
        let mut x = self.embed.index_select(&tokens, 0)?.reshape((b, t, self.cfg.hidden_size))?.detach();
        let mut inputs = Vec::with_capacity(self.layers.len());
        for (l, layer) in self.layers.iter().enumerate() {
            let next = self.layer_forward(l, layer, &x, &rope, &vis, None)?.detach();
            inputs.push(x);
            x = next;
        }
        let top = Var::from_tensor(&x)?;
        Ok(LayerInputs { tokens, batch: b, len: t, inputs, rope, vis, top })
    }

    /// Backward through the decoder layers and the embedding, given
    /// `grad_top`, the gradient of the loss with respect to
    /// [`LayerInputs::top`]. For each layer from the last to the first, and
    /// then for the embedding, `each` receives the [`GradStore`] holding the
    /// gradients of that part's weights (look them up by the parameters'
    /// `Var`s and add them up: a tied embedding also got its head gradient
    /// from the caller's loss). Each layer's saved input is freed once used.
    pub fn backward_layers(
        &self,
        saved: LayerInputs,
        grad_top: &Tensor,
        mut each: impl FnMut(&GradStore) -> Result<()>,
    ) -> Result<()> {
        let LayerInputs { tokens, batch, len, mut inputs, rope, vis, top } = saved;
        if grad_top.dims() != top.dims() {
            return Err(Error::invalid(
                "backward_layers",
                format!("gradient is {:?}, the last layer's output {:?}", grad_top.dims(), top.dims()),
            ));
        }
        if inputs.len() != self.layers.len() {
            return Err(Error::invalid(
                "backward_layers",
                format!("{} saved layer inputs for {} layers", inputs.len(), self.layers.len()),
            ));
        }
        drop(top);
        let mut grad = grad_top.detach();
        for (l, layer) in self.layers.iter().enumerate().rev() {
            let x = inputs.pop().map(|x| Var::from_tensor(&x)).transpose()?.ok_or_else(|| {
                Error::invalid("backward_layers", format!("no saved input for layer {l}"))
            })?;
            let out = self.layer_forward(l, layer, x.as_tensor(), &rope, &vis, None)?;
            let store = (out * &grad)?.sum_all()?.backward()?;
            each(&store)?;
            grad = store
                .get(x.as_tensor())
                .ok_or_else(|| Error::invalid("backward_layers", format!("layer {l}'s input received no gradient")))?
                .detach();
        }
        let embedded = self.embed.index_select(&tokens, 0)?.reshape((batch, len, self.cfg.hidden_size))?;
        let store = (embedded * &grad)?.sum_all()?.backward()?;
        each(&store)
    }
}

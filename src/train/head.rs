//! The MTP head as trainable parameters (candle-nn `VarMap`, saved under MiMo names, so the file loads
//! as an [`crate::model::mtp::MtpHead`]), with a forward pass written in ops that have gradients
//! (RMSNorm, RoPE, softmax and attention spelled out) over a batch of whole training sequences
//! side by side, unrolled for k chain steps with the attention of inference: step 1 is the first
//! pass over the context (causal); step j at row p sits at position p + j - 1 and sees the
//! context rows 0..=p of step 1 and its own row p of steps 2..=j, as a chain drafted from
//! position p does.

use super::layer_ops::{layer_params, make_param, random_matrix, LayerOps};
use crate::arch::config::ModelConfig;
use crate::arch::weights::hf_name;
use crate::error::Result;
use crate::model::decoder::MASKED;
use crate::model::mtp::fusion;
use candle_core::{DType, Device, Tensor};
use candle_nn::{Init, VarMap};

/// The saved name of the head's tensor of GGUF-style stem `stem` (`attn_q.weight` ->
/// `model.mtp_layers.0.self_attn.q_proj.weight`): the name [`crate::model::mtp::MtpHead`] looks for.
pub fn saved_name(stem: &str) -> String {
    hf_name(&format!("mtp.0.{stem}"), "model.")
}

/// Where a head's block can be copied from: the tensor of a GGUF-style name, if there is one.
pub type LayerSource<'a> = dyn Fn(&str) -> Option<Tensor> + 'a;

/// The head's parameters.
pub struct TrainableHead {
    vars: VarMap,
    cfg: ModelConfig,
    /// The target layers it fuses ([`crate::model::mtp::fusion`]), if it fuses several.
    fused: Option<Vec<usize>>,
}

/// What a forward pass over a batch of sequences gives: per chain step, its `o` rows
/// (`[b * t, hidden]`, sequence-major: the LM head's input).
pub struct Unrolled {
    /// Step j's outputs (every row p = 0..t of every sequence), step 1 first.
    pub outputs: Vec<Tensor>,
}

impl TrainableHead {
    /// A head for a target shaped as `cfg`: norms at one, matrices at small random values drawn
    /// from `seed`, or (where `init` gives them, under GGUF-style names `blk.{last}.*`) the
    /// target's last layer.
    pub fn new(
        cfg: &ModelConfig,
        device: &Device,
        seed: u64,
        init: Option<&LayerSource<'_>>,
    ) -> Result<Self> {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut vars = VarMap::new();
        let h = cfg.hidden;
        let last = cfg.n_layers - 1;
        // GGUF-style stems (named as `MtpHead` reads them, through `hf_name`), their shapes, and
        // whether the target's last layer has a tensor of that stem to start from.
        let mut params: Vec<(&str, Vec<usize>, bool)> = vec![
            ("token_norm.weight", vec![h], false),
            ("hidden_norm.weight", vec![h], false),
            ("final_norm.weight", vec![h], false),
            ("input_proj.weight", vec![h, 2 * h], false),
        ];
        params.extend(
            layer_params(cfg)
                .into_iter()
                .map(|(s, shape)| (s, shape, true)),
        );
        for (stem, shape, in_target) in params {
            let full = saved_name(stem);
            let copied = init
                .filter(|_| in_target)
                .and_then(|i| i(&format!("blk.{last}.{stem}")))
                .filter(|t| t.dims() == shape.as_slice());
            let value = match copied {
                Some(t) => Some(t),
                None if shape.len() == 2 => Some(random_matrix(&mut rng, &shape)?),
                None => None,
            };
            let is_norm = stem.ends_with("norm.weight");
            make_param(&mut vars, &full, &shape, is_norm, value, device)?;
        }
        Ok(TrainableHead {
            vars,
            cfg: cfg.clone(),
            fused: None,
        })
    }

    /// The head fed the fusion of the target layers `layers` ([`crate::model::mtp::fusion`])
    /// instead of the last layer alone: its projection starts as the selection of the last
    /// layer where it is listed (the unfused head's input), else as the mean of the parts.
    pub fn with_feature_layers(mut self, layers: Vec<usize>) -> Result<Self> {
        fusion::check_layers(&layers, self.cfg.n_layers)?;
        let h = self.cfg.hidden;
        let name = saved_name(fusion::STEM_PROJ);
        let device = self
            .locked()?
            .values()
            .next()
            .map(|v| v.device().clone())
            .unwrap_or(Device::Cpu);
        let start = fusion::initial_projection(&layers, self.cfg.n_layers - 1, h, &device)?;
        self.vars.get(
            (h, layers.len() * h),
            &name,
            Init::Const(0.0),
            DType::F32,
            &device,
        )?;
        self.vars.set_one(&name, start)?;
        self.fused = Some(layers);
        Ok(self)
    }

    /// The target layers whose outputs it reads, side by side in that order: the fused ones,
    /// else the last.
    pub fn feature_layers(&self) -> Vec<usize> {
        self.fused
            .clone()
            .unwrap_or_else(|| vec![self.cfg.n_layers - 1])
    }

    /// Set every parameter from `tensors` (by GGUF-style stem, as [`crate::model::mtp_gguf::read_f32`]
    /// gives them): a head trained before, to go on training from. Every parameter must be
    /// there, shaped as here.
    pub fn set_from(&mut self, tensors: &[(String, Tensor)]) -> Result<()> {
        let given: std::collections::HashMap<String, &Tensor> = tensors
            .iter()
            .map(|(stem, t)| (saved_name(stem), t))
            .collect();
        let theirs = match given.get(&saved_name(fusion::STEM_LAYERS)) {
            Some(t) => Some(fusion::layers_of(t)?),
            None => None,
        };
        if let Some(layers) = theirs.as_ref().filter(|&l| Some(l) != self.fused.as_ref()) {
            let spelled: Vec<String> = layers.iter().map(|l| l.to_string()).collect();
            return Err(crate::error::Error::InvalidArgument(format!(
                "the head to start from fuses target layers {layers:?}; train it with --feature-layers {}",
                spelled.join(",")
            )));
        }
        let proj = saved_name(fusion::STEM_PROJ);
        let data = self.locked()?;
        for (name, var) in data.iter() {
            if theirs.is_none() && *name == proj {
                // An unfused head to start from: the projection keeps its start.
                continue;
            }
            let t = given.get(name).ok_or_else(|| {
                crate::error::Error::InvalidArgument(format!(
                    "the head to start from has no {name}"
                ))
            })?;
            if t.dims() != var.dims() {
                return Err(crate::error::Error::InvalidArgument(format!(
                    "the head to start from has {name} shaped {:?}, not {:?}",
                    t.dims(),
                    var.dims()
                )));
            }
            var.set(&t.to_device(var.device())?)?;
        }
        Ok(())
    }

    /// The parameters, for the optimiser and for saving.
    pub fn vars(&self) -> &VarMap {
        &self.vars
    }

    /// Mutable parameters (to load a checkpoint into).
    pub fn vars_mut(&mut self) -> &mut VarMap {
        &mut self.vars
    }

    /// The parameters by saved name, as they are now (to save them), and the fused layers'
    /// indices where it fuses several.
    pub fn tensors(&self) -> Result<std::collections::HashMap<String, Tensor>> {
        let mut out: std::collections::HashMap<String, Tensor> = self
            .locked()?
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
            .collect();
        if let Some(layers) = &self.fused {
            out.insert(
                saved_name(fusion::STEM_LAYERS),
                fusion::layers_tensor(layers)?,
            );
        }
        Ok(out)
    }

    fn locked(
        &self,
    ) -> Result<std::sync::MutexGuard<'_, std::collections::HashMap<String, candle_core::Var>>>
    {
        self.vars.data().lock().map_err(|_| {
            crate::error::Error::InvalidArgument("the head's parameters are poisoned".into())
        })
    }

    /// Run `f` over the parameters read as a decoder layer (locked once).
    fn with_ops<T>(&self, f: impl FnOnce(&LayerOps<'_>) -> Result<T>) -> Result<T> {
        let vars = self.locked()?;
        let name = |stem: &str| saved_name(stem);
        f(&LayerOps {
            vars: &vars,
            cfg: &self.cfg,
            name: &name,
        })
    }

    /// The hidden state step 1 reads from the target's rows `x` `[rows, layers * hidden]`: the
    /// last layer's, or the fused layers' ([`crate::model::mtp::fusion`]).
    fn target_hidden(&self, ops: &LayerOps<'_>, x: &Tensor) -> Result<Tensor> {
        match &self.fused {
            None => Ok(x.clone()),
            Some(layers) => {
                let parts = fusion::normalised_parts(x, layers.len(), self.cfg.rms_eps, None)?;
                ops.linear(&parts, "feature_proj", false)
            }
        }
    }

    /// The head's input rows: `input_proj(cat[hidden_norm(g), token_norm(e)])`.
    fn input(ops: &LayerOps<'_>, g: &Tensor, e: &Tensor) -> Result<Tensor> {
        let g = ops.norm(g, "hidden_norm.weight")?;
        let e = ops.norm(e, "token_norm.weight")?;
        ops.linear(&Tensor::cat(&[&g, &e], 1)?, "input_proj", false)
    }

    /// Unrolled forward over `b` sequences of `t` positions side by side (shorter ones padded
    /// at the end: no row sees a later one): `hidden` `[b, t, layers * h]` (the target's
    /// outputs of [`TrainableHead::feature_layers`], side by side), `embeds` `[b, t + k, h]` (the target's embeddings of the tokens, zero
    /// past each sequence's end), `cos`, `sin` `[t + k, hd / 2]` (rows by position), for `k`
    /// chain steps. Every step has `t` rows a sequence (row p of step j at position p + j - 1,
    /// fed token p + j): those past a sequence's end are computed and meant to be ignored.
    pub fn forward(
        &self,
        hidden: &Tensor,
        embeds: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        k: usize,
    ) -> Result<Unrolled> {
        self.with_ops(|ops| {
            let (b, t, width) = hidden.dims3()?;
            let h = self.cfg.hidden;
            let device = hidden.device();
            let flat = |x: Tensor| x.reshape((b * t, h));
            // Step 1: (h_p, x_{p+1}) at position p, the embedding zeroed at p = 0.
            let keep = Tensor::from_vec(
                (0..t)
                    .map(|p| if p == 0 { 0f32 } else { 1.0 })
                    .collect::<Vec<_>>(),
                (1, t, 1),
                device,
            )?;
            let e1 = flat(embeds.narrow(1, 1, t)?.broadcast_mul(&keep)?)?;
            let g1 = self.target_hidden(ops, &hidden.reshape((b * t, width))?)?;
            let u = Self::input(ops, &g1, &e1)?;
            let (cos1, sin1) = (cos.narrow(0, 0, t)?, sin.narrow(0, 0, t)?);
            let (q, k1, v1) = ops.qkv(&u, b, &cos1, &sin1)?;
            let causal: Vec<f32> = (0..t)
                .flat_map(|i| (0..t).map(move |j| if j <= i { 0.0 } else { MASKED }))
                .collect();
            let mask = Tensor::from_vec(causal, (t, t), device)?;
            let y = ops.finish(&u, &q, &k1, &v1, &mask)?;
            let mut o = ops.norm(&y, "final_norm.weight")?;
            let mut outputs = vec![o.clone()];
            let (mut ks, mut vs) = (vec![k1], vec![v1]);
            for j in 2..=k {
                // Row p: (o_{j-1}[p], x_{p+j}) at position p + j - 1.
                let u = Self::input(ops, &o, &flat(embeds.narrow(1, j, t)?)?)?;
                let (q, kj, vj) =
                    ops.qkv(&u, b, &cos.narrow(0, j - 1, t)?, &sin.narrow(0, j - 1, t)?)?;
                ks.push(kj);
                vs.push(vj);
                // Keys: step 1's rows 0..=p, and row p of each later step.
                let total = t * ks.len();
                let mut m = vec![MASKED; t * total];
                for p in 0..t {
                    let row = &mut m[p * total..(p + 1) * total];
                    row[..=p].fill(0.0);
                    for s in 1..ks.len() {
                        row[s * t + p] = 0.0;
                    }
                }
                let mask = Tensor::from_vec(m, (t, total), device)?;
                let k_all = Tensor::cat(&ks.iter().collect::<Vec<_>>(), 1)?;
                let v_all = Tensor::cat(&vs.iter().collect::<Vec<_>>(), 1)?;
                let y = ops.finish(&u, &q, &k_all, &v_all, &mask)?;
                o = ops.norm(&y, "final_norm.weight")?;
                outputs.push(o.clone());
            }
            Ok(Unrolled { outputs })
        })
    }
}

//! The DFlash block drafter ([`crate::draft::dflash`]; z-lab, "DFlash", arXiv:2602.06036) as
//! trainable parameters for a target, saved as a checkpoint directory (`config.json` and
//! `model.safetensors` in z-lab's layout) that [`crate::draft::DFlashDrafter`] loads, with a
//! forward pass in ops that have gradients (`layer_ops`) over many blocks of one
//! training sequence at once.
//!
//! A block is anchored at a position `a` of the sequence: its rows are the token at `a` (the
//! root, which inference takes from the target's last verification) and `block_size - 1` mask
//! tokens at positions `a .. a + block_size`; it sees the context features of positions `0 .. a`
//! (the target's hidden states of the drafter's layers, fused by `fc` and `hidden_norm`) and the
//! whole of its own block, no other block. Row `d >= 1` of the block predicts the token at
//! `a + d`: trained on the target's distribution there, as the head is ([`super::loss`]).

use super::head::LayerSource;
use super::layer_ops::{layer_params, make_param, random_matrix, LayerOps};
use super::loss::{soft_cross_entropy, RowTargets};
use crate::arch::config::ModelConfig;
use crate::arch::weights::hf_name;
use crate::draft::dflash::{config_json, DFlashConfig, DFlashShape};
use crate::error::{Error, Result};
use crate::model::decoder::MASKED;
use candle_core::{Device, Tensor};
use candle_nn::{AdamW, Optimizer, VarMap};
use std::path::Path;

/// The saved (z-lab) name of a tensor of GGUF-style name `gguf` (`blk.0.attn_q.weight` ->
/// `layers.0.self_attn.q_proj.weight`, `output_norm.weight` -> `norm.weight`).
fn saved_name(gguf: &str) -> String {
    hf_name(gguf, "")
}

/// Blocks of one training sequence, as [`TrainableDFlash::forward`] reads them.
#[derive(Clone, Copy)]
pub struct Blocks<'a> {
    /// `[t, layers x target hidden]`: the target's hidden states of
    /// [`DFlashConfig::target_layer_ids`] side by side, rows by position, at least up to the
    /// last anchor.
    pub features: &'a Tensor,
    /// `[anchors x block_size, h]`: the target's embeddings of each block's root and mask
    /// tokens, block by block.
    pub embeds: &'a Tensor,
    /// Each block's anchor: the position of its root (at least 1: a block sees the context
    /// before it).
    pub anchors: &'a [usize],
    /// The drafter's rotation tables, rows by position, past the last block's end.
    pub cos: &'a Tensor,
    /// See `cos`.
    pub sin: &'a Tensor,
}

/// A DFlash drafter's parameters and configuration.
pub struct TrainableDFlash {
    vars: VarMap,
    cfg: DFlashConfig,
    /// Its `config.json`, as `cfg` was read from.
    config_json: serde_json::Value,
}

impl TrainableDFlash {
    /// A drafter of `shape` for `target`: Qwen3 layers of the target's width, heads and MLP,
    /// norms at one, matrices at small random values drawn from `seed`.
    ///
    /// With `init` (the target's tensors by GGUF name), drafter layer i starts as target layer
    /// `n_layers - layers + i` (its last layers) wherever a tensor of the same stem and shape
    /// exists (biases, which the drafter has none of, are dropped); the rest as above.
    pub fn new(
        target: &ModelConfig,
        shape: &DFlashShape,
        device: &Device,
        seed: u64,
        init: Option<&LayerSource<'_>>,
    ) -> Result<Self> {
        use rand::SeedableRng;
        let json = config_json(target, shape)?;
        let cfg = DFlashConfig::from_json(&json.to_string())?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (target_source, first_copied) = (init, target.n_layers.saturating_sub(shape.layers));
        let mut vars = VarMap::new();
        let h = cfg.model.hidden;
        let mut params: Vec<(String, Vec<usize>)> = vec![
            (
                "fc.weight".into(),
                vec![h, cfg.target_layer_ids.len() * target.hidden],
            ),
            ("hidden_norm.weight".into(), vec![h]),
            ("output_norm.weight".into(), vec![h]),
        ];
        for i in 0..cfg.model.n_layers {
            params.extend(
                layer_params(&cfg.model)
                    .into_iter()
                    .map(|(stem, s)| (format!("blk.{i}.{stem}"), s)),
            );
        }
        for (gguf, shape) in params {
            // The random draw is made either way, so that the other tensors do not move.
            let drawn = if shape.len() == 2 {
                Some(random_matrix(&mut rng, &shape)?)
            } else {
                None
            };
            let copied = target_source
                .and_then(|source| {
                    let (i, stem) = gguf.strip_prefix("blk.")?.split_once('.')?;
                    let i: usize = i.parse().ok()?;
                    source(&format!("blk.{}.{stem}", first_copied + i))
                })
                .filter(|t| t.dims() == shape.as_slice());
            let is_norm = gguf.ends_with("norm.weight");
            make_param(
                &mut vars,
                &saved_name(&gguf),
                &shape,
                is_norm,
                copied.or(drawn),
                device,
            )?;
        }
        Ok(TrainableDFlash {
            vars,
            cfg,
            config_json: json,
        })
    }

    /// Its configuration, as [`crate::draft::DFlashDrafter`] reads it.
    pub fn config(&self) -> &DFlashConfig {
        &self.cfg
    }

    /// The parameters, for the optimiser.
    pub fn vars(&self) -> &VarMap {
        &self.vars
    }

    /// Write `config.json` and `model.safetensors` into `dir` (made if missing), each through
    /// a temporary file renamed over it: a run killed while saving (a command's time limit)
    /// leaves the last checkpoint whole.
    pub fn save_dir(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let config = dir.join("config.json");
        let text = serde_json::to_string_pretty(&self.config_json)
            .map_err(|e| Error::Config(format!("config.json: {e}")))?;
        let tmp = dir.join("config.json.tmp");
        std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, &config).map_err(|e| Error::io(&config, e))?;
        let weights = dir.join("model.safetensors");
        let tmp = dir.join("model.safetensors.tmp");
        self.vars.save(&tmp)?;
        std::fs::rename(&tmp, &weights).map_err(|e| Error::io(&weights, e))?;
        Ok(())
    }

    /// Its parameters set from a drafter of the same shape saved in `dir` ([`Self::save_dir`]),
    /// to resume training it. An error names the tensor that is missing or of another shape.
    pub fn load_dir(&mut self, dir: &Path) -> Result<()> {
        let weights = dir.join("model.safetensors");
        if !weights.exists() {
            return Err(Error::InvalidArgument(format!(
                "{}: no drafter to resume",
                weights.display()
            )));
        }
        self.vars.load(&weights).map_err(|e| {
            Error::InvalidArgument(format!(
                "{}: not a checkpoint of this drafter's shape: {e}",
                weights.display()
            ))
        })
    }

    /// The block rows' outputs (after the drafter's final norm, the LM head's input), block by
    /// block, the rows of depths 1 .. block_size - 1 (row d predicts the token at anchor + d):
    /// `[anchors x (block_size - 1), h]`.
    pub fn forward(&self, blocks: &Blocks<'_>) -> Result<Tensor> {
        let Blocks {
            features,
            embeds: block_embeds,
            anchors,
            cos,
            sin,
        } = *blocks;
        let bs = self.cfg.block_size;
        let device = features.device();
        let (Some(&first), Some(&last)) = (anchors.iter().min(), anchors.iter().max()) else {
            return Err(Error::InvalidArgument("a DFlash batch of no blocks".into()));
        };
        let bad = |why: String| Err(Error::InvalidArgument(format!("DFlash blocks: {why}")));
        if first == 0 {
            return bad("a block anchored at 0 sees no context".into());
        }
        if last > features.dim(0)? {
            return bad(format!(
                "a block anchored at {last}, with context features of {} positions",
                features.dim(0)?
            ));
        }
        let rows = anchors.len() * bs;
        if block_embeds.dim(0)? != rows {
            return bad(format!(
                "{} embedded rows for {} blocks of {bs}",
                block_embeds.dim(0)?,
                anchors.len()
            ));
        }
        if last + bs > cos.dim(0)? {
            return bad(format!(
                "a block ending at {} past the {} positions of the rotation tables",
                last + bs,
                cos.dim(0)?
            ));
        }
        let ctx_rows = last;
        let positions: Vec<u32> = anchors
            .iter()
            .flat_map(|&a| (a..a + bs).map(|p| p as u32))
            .collect();
        let at = Tensor::from_vec(positions, rows, device)?;
        let (bcos, bsin) = (cos.index_select(&at, 0)?, sin.index_select(&at, 0)?);
        let (ccos, csin) = (cos.narrow(0, 0, ctx_rows)?, sin.narrow(0, 0, ctx_rows)?);
        // Block i's rows see the context before its anchor and every row of block i.
        let keys = ctx_rows + rows;
        let mut mask = vec![MASKED; rows * keys];
        for (i, &a) in anchors.iter().enumerate() {
            for r in i * bs..(i + 1) * bs {
                let row = &mut mask[r * keys..(r + 1) * keys];
                row[..a].fill(0.0);
                row[ctx_rows + i * bs..ctx_rows + (i + 1) * bs].fill(0.0);
            }
        }
        let mask = Tensor::from_vec(mask, (rows, keys), device)?;
        let vars = self.vars.data().lock().map_err(|_| {
            Error::InvalidArgument("the DFlash drafter's parameters are poisoned".into())
        })?;
        let top = LayerOps {
            vars: &vars,
            cfg: &self.cfg.model,
            name: &saved_name,
        };
        let ctx = top.linear(&features.narrow(0, 0, ctx_rows)?, "fc", false)?;
        let ctx = top.norm(&ctx, "hidden_norm.weight")?;
        let mut x = block_embeds.clone();
        for li in 0..self.cfg.model.n_layers {
            let name = move |stem: &str| saved_name(&format!("blk.{li}.{stem}"));
            let ops = LayerOps {
                vars: &vars,
                cfg: &self.cfg.model,
                name: &name,
            };
            let (q, kb, vb) = ops.qkv(&x, 1, &bcos, &bsin)?;
            let (kc, vc) = ops.kv_normed(&ctx, 1, &ccos, &csin)?;
            let k = Tensor::cat(&[&kc, &kb], 1)?;
            let v = Tensor::cat(&[&vc, &vb], 1)?;
            x = ops.finish(&x, &q, &k, &v, &mask)?;
        }
        // Depths 1 .. block_size - 1 of each block.
        let depth_rows: Vec<u32> = (0..anchors.len())
            .flat_map(|i| (1..bs).map(move |d| (i * bs + d) as u32))
            .collect();
        let n = depth_rows.len();
        let x = x.index_select(&Tensor::from_vec(depth_rows, n, device)?, 0)?;
        top.norm(&x, "output_norm.weight")
    }

    /// The loss of `blocks` against `targets` (the target's distributions at each depth row's
    /// position, rows in [`TrainableDFlash::forward`]'s order) through the LM head `lm_head`
    /// `[vocab, h]` (frozen, f32), its gradient scaled by `scale` (one over the rows an
    /// optimiser step counts, summed over the sequences of its batch).
    pub fn loss(
        &self,
        blocks: &Blocks<'_>,
        lm_head: &Tensor,
        targets: &RowTargets<'_>,
        scale: f64,
    ) -> Result<BlockLoss> {
        let rows = self.forward(blocks)?;
        let loss = soft_cross_entropy(&rows, lm_head, targets, scale)?;
        Ok(BlockLoss {
            // The surrogate whose gradient is the loss's: the rows times their gradient.
            surrogate: (&rows * loss.grad.detach())?.sum_all()?,
            ce_sum: loss.ce_sum,
            agreed: loss.agreed,
            hits: loss.hits,
            depth: self.cfg.block_size - 1,
        })
    }

    /// The loss of one sequence's `blocks` ([`TrainableDFlash::loss`], the mean over the
    /// blocks' depth rows, those past the sequence's end included) and with `opt` one optimiser
    /// step on it: the rows' summed cross-entropy and how many of them agree with the target's
    /// top token.
    pub fn step(
        &self,
        opt: Option<&mut AdamW>,
        blocks: &Blocks<'_>,
        lm_head: &Tensor,
        targets: &RowTargets<'_>,
    ) -> Result<(f32, f32)> {
        let rows = blocks.anchors.len() * (self.cfg.block_size - 1);
        let loss = self.loss(blocks, lm_head, targets, 1.0 / rows.max(1) as f64)?;
        if let Some(opt) = opt {
            opt.backward_step(&loss.surrogate)?;
        }
        let figures: Vec<f32> = Tensor::stack(&[&loss.ce_sum, &loss.agreed], 0)?.to_vec1()?;
        Ok((figures[0], figures[1]))
    }
}

/// What [`TrainableDFlash::loss`] gives for a sequence's blocks (on the device: read them once a
/// step).
pub struct BlockLoss {
    /// A scalar whose gradient is the loss's (sum several sequences' before a step).
    pub surrogate: Tensor,
    /// The rows' summed cross-entropy (a scalar).
    pub ce_sum: Tensor,
    /// Rows whose top token is the target's (a scalar).
    pub agreed: Tensor,
    /// Per row, 1 where its top token is the target's.
    pub hits: Tensor,
    /// Rows a block has.
    depth: usize,
}

impl BlockLoss {
    /// Per block, the depths a greedy verification accepts: its rows agreeing with the target
    /// from depth 1 on (a step of the block then emits one more, the target's own).
    pub fn accepted(&self) -> Result<Vec<usize>> {
        let hits: Vec<f32> = self.hits.to_vec1()?;
        Ok(hits
            .chunks(self.depth)
            .map(|block| block.iter().take_while(|&&h| h > 0.5).count())
            .collect())
    }
}

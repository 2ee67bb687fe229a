//! The cost of drafting with DFlash against a causal-LM drafter, side by side on one machine.
//!
//! No real DFlash checkpoint is reachable from these machines, so this builds one with random
//! weights in the z-lab layout, shaped for the given target (its hidden size, `layers` drafter
//! layers, block size 16, five target layers read), and times:
//! one DFlash pass (block 16) against L single-token steps of the causal drafter, and the
//! resulting tree step (draft + verify of a tree of B nodes). Acceptance is not measured here
//! (random weights accept nothing); the timings are what a trained drafter of this shape costs.
//!
//!     cargo run --release --example dflash_cost -- [TARGET] [DRAFTER] [LAYERS]

use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::time::Instant;
use treespec::draft::{DFlashDrafter, Drafter};
use treespec::model::decoder::{Batch, BlockMask};
use treespec::model::{self, LoadOptions};

fn median_ms(mut f: impl FnMut(), reps: usize) -> f64 {
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let fetch = |key: &str| -> anyhow::Result<String> {
        Ok(
            treespec::fetch::ensure(&treespec::fetch::known(key).unwrap())?
                .display()
                .to_string(),
        )
    };
    let target_path = match args.get(1) {
        Some(p) => p.clone(),
        None => fetch("target")?,
    };
    let drafter_path = match args.get(2) {
        Some(p) => p.clone(),
        None => fetch("drafter")?,
    };
    let layers: usize = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(5);
    let opts = LoadOptions::default();
    let mut target = model::load(&target_path, &opts)?;
    let mut causal = model::load(&drafter_path, &opts)?;
    let tc = target.decoder.config().clone();
    let (h, heads, kv, hd, ffn) = (tc.hidden, tc.n_heads, tc.n_kv_heads, tc.head_dim, tc.ffn);
    let ids: Vec<usize> = treespec::draft::dflash::default_target_layer_ids(tc.n_layers, 5);
    let block = 16;

    // A random DFlash checkpoint shaped for this target.
    let dir = tempfile::tempdir()?;
    let dev = Device::Cpu;
    let mut w: HashMap<String, Tensor> = HashMap::new();
    let rnd = |r: usize, c: usize| Tensor::randn(0f32, 0.02, (r, c), &dev).unwrap();
    let ones = |n: usize| Tensor::ones(n, DType::F32, &dev).unwrap();
    for i in 0..layers {
        let p = format!("layers.{i}.");
        w.insert(format!("{p}self_attn.q_proj.weight"), rnd(heads * hd, h));
        w.insert(format!("{p}self_attn.k_proj.weight"), rnd(kv * hd, h));
        w.insert(format!("{p}self_attn.v_proj.weight"), rnd(kv * hd, h));
        w.insert(format!("{p}self_attn.o_proj.weight"), rnd(h, heads * hd));
        w.insert(format!("{p}self_attn.q_norm.weight"), ones(hd));
        w.insert(format!("{p}self_attn.k_norm.weight"), ones(hd));
        w.insert(format!("{p}mlp.gate_proj.weight"), rnd(ffn, h));
        w.insert(format!("{p}mlp.up_proj.weight"), rnd(ffn, h));
        w.insert(format!("{p}mlp.down_proj.weight"), rnd(h, ffn));
        w.insert(format!("{p}input_layernorm.weight"), ones(h));
        w.insert(format!("{p}post_attention_layernorm.weight"), ones(h));
    }
    w.insert("fc.weight".into(), rnd(h, ids.len() * h));
    w.insert("hidden_norm.weight".into(), ones(h));
    w.insert("norm.weight".into(), ones(h));
    candle_core::safetensors::save(&w, dir.path().join("model.safetensors"))?;
    let config = serde_json::json!({
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": h, "intermediate_size": ffn, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
        "vocab_size": tc.vocab_size, "rms_norm_eps": 1e-6, "rope_theta": tc.rope_theta,
        "max_position_embeddings": 32768, "block_size": block,
        "num_target_layers": tc.n_layers,
        "dflash_config": { "target_layer_ids": ids, "mask_token_id": tc.vocab_size - 1 }
    });
    std::fs::write(dir.path().join("config.json"), config.to_string())?;
    let quantize = std::env::var_os("DFLASH_F32").is_none();
    let mut dflash = DFlashDrafter::load_dir(dir.path(), &dev, target.decoder.context(), quantize)?;
    dflash.check_target(&tc)?;

    // A 256-token context in all three models.
    let ctx: Vec<u32> = (0..256u32).map(|i| (i * 7919 + 13) % 150_000).collect();
    let out = target.decoder.forward(
        &Batch::causal(&ctx, 0)
            .with_logits_rows(vec![])
            .with_hidden_layers(ids.clone()),
    )?;
    let feats = Tensor::cat(&out.hidden, 1)?;
    causal
        .decoder
        .forward(&Batch::causal(&ctx, 0).with_logits_rows(vec![]))?;
    let reps = 7;

    let dflash_ms = median_ms(
        || {
            dflash.truncate(256);
            // Each round brings the features of a few newly accepted tokens.
            dflash.truncate(252);
            dflash
                .push_features(feats.narrow(0, 252, 4).unwrap())
                .unwrap();
            dflash.draft(11, &target.decoder).unwrap();
        },
        reps,
    );
    let causal_step = median_ms(
        || {
            causal.decoder.truncate(256);
            causal.decoder.forward(&Batch::causal(&[11], 256)).unwrap();
        },
        reps,
    );
    let mut verify = |n: usize| {
        let parents: Vec<Option<usize>> = (0..n)
            .map(|i| if i == 0 { None } else { Some((i - 1) / 2) })
            .collect();
        let mask = BlockMask::from_parents(&parents).unwrap();
        let toks: Vec<u32> = (0..n as u32).map(|i| 100 + i).collect();
        let last = target.decoder.config().n_layers - 1;
        median_ms(
            || {
                target.decoder.truncate(256);
                target
                    .decoder
                    .forward(
                        &Batch::causal(&toks, 256)
                            .with_mask(mask.clone())
                            .with_logits_rows(vec![])
                            .with_hidden_layers(vec![last]),
                    )
                    .unwrap();
            },
            reps,
        )
    };
    println!(
        "target {}, causal drafter {}, DFlash drafter: {layers} layers, hidden {h}, block {block}, reads layers {ids:?}, weights {}\n",
        target.name,
        causal.name,
        if quantize { "Q8_0" } else { "f32" }
    );
    println!("| drafting | ms | vs one DFlash pass |\n| --- | ---: | ---: |");
    println!("| DFlash, one pass (15 depths) | {dflash_ms:.1} | 1.00 |");
    for l in [4usize, 6, 8, 15] {
        let ms = causal_step * l as f64;
        println!(
            "| causal LM, {l} chain steps | {ms:.1} | {:.2} |",
            ms / dflash_ms
        );
    }
    println!("\n| tree step (draft + verify) | B | causal L=4 ms | DFlash ms | ratio |\n| --- | ---: | ---: | ---: | ---: |");
    for b in [8usize, 16, 32] {
        let v = verify(b + 1);
        let c = causal_step * 4.0 + v;
        let d = dflash_ms + v;
        println!("| tree B{b} | {b} | {c:.1} | {d:.1} | {:.2} |", c / d);
    }
    Ok(())
}

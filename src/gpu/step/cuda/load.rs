//! Building the step over a decoder's weights: the layers' device addresses, the kernels by
//! format, the products' groupings; and the few settings read from the environment.

use super::*;

impl GpuStep {
    /// Build the step over a decoder's weights, or say why it cannot run them; its tensor-core
    /// products in the K-quant family where `family` ([`super::mmq_wanted`]) and the shape fits.
    pub fn new(
        w: &StepWeights,
        device: &Device,
        family: bool,
    ) -> std::result::Result<Self, String> {
        let Device::Cuda(dev) = device else {
            return Err("not a GPU".into());
        };
        let cfg = w.cfg;
        let (nh, nkv) = (cfg.n_heads, cfg.n_kv_heads);
        if !crate::gpu::attention::supports(nh, nkv, cfg.head_dim, device) {
            return Err("head shape the attention kernel does not take".into());
        }
        let stream = dev.cuda_stream();
        let mut keep = vec![];
        let mut ptr = |t: &Tensor| -> std::result::Result<u64, String> {
            let t = t
                .to_dtype(candle_core::DType::F32)
                .map_err(|e| e.to_string())?;
            let t = t.contiguous().map_err(|e| e.to_string())?;
            let p = tensor_ptr(&t, &stream)?;
            keep.push(t);
            Ok(p)
        };
        let h = cfg.hidden;
        let hd = cfg.head_dim;
        let rot = cfg.rotary_dim;
        if rot != hd && matches!(cfg.rope_style, RopeStyle::Interleaved) {
            return Err("partial RoPE over interleaved pairs".into());
        }
        let mut layers = Vec::with_capacity(w.layers.len());
        for (i, (l, (kc, vc))) in w.layers.iter().zip(&w.caches).enumerate() {
            let layer = load_layer(i, l, cfg, &stream, &mut ptr)?;
            if layer.gdn.is_none() {
                let rows = |t: &Tensor| t.dims3().map(|d| d.1).map_err(|e| e.to_string());
                if rows(kc)? != rows(vc)? {
                    return Err("K and V caches of different sizes".into());
                }
            }
            layers.push(layer);
        }
        let qkv_width = layers.iter().map(|l| l.width).max().unwrap_or(0);
        set_caches(&mut layers, &w.caches, &stream)?;
        let linear = match (&cfg.linear, w.layers.iter().find_map(|l| l.gdn_weights())) {
            (Some(shape), Some(g)) => Some((shape.clone(), g.eps())),
            _ => None,
        };
        // Cache rows: of the first attention layer (a Gated DeltaNet layer has none).
        let capacity = w.caches.iter().zip(&layers).find(|(_, l)| l.gdn.is_none());
        let capacity = capacity.map_or(0, |((k, _), _)| k.dim(1).unwrap_or(0));
        let embed = match w.embed {
            Embedding::Quantized(q) => Embed::Quantized {
                _keep: q.clone(),
                ptr: q.device_ptr().map_err(|e| e.to_string())? as u64,
                dtype: q.dtype(),
                row_bytes: h / q.dtype().block_size() * q.dtype().type_size(),
            },
            Embedding::Dense(t) => Embed::Dense(ptr(t)?),
            Embedding::Blocks(_) => return Err("embedding on the host".into()),
        };
        let (lm_head, lb) = mat(w.lm_head, "LM head")?;
        if lb.is_some() {
            return Err("LM head with a bias".into());
        }
        let norm = ptr(w.norm)?;
        let cos = ptr(w.cos)?;
        let sin = ptr(w.sin)?;
        // The int8 MMA needs sm_80: on an older GPU the module is not loaded at all (one that
        // failed to load would take the whole step down).
        let (major, _) = stream
            .context()
            .compute_capability()
            .map_err(|e| e.to_string())?;
        let group = cfg.n_heads / cfg.n_kv_heads;
        let mmq = family && mmq_fits(cfg);
        let f = load_funcs(
            dev,
            &layers,
            &lm_head,
            &embed,
            (major >= 8, mmq),
            (hd, group),
        )
        .map_err(|e| e.to_string())?;
        if linear.is_some() && f.gdn.is_none() {
            return Err("Gated DeltaNet kernels missing".into());
        }
        let pdl = LaunchOn::new(&stream).pdl;
        let gpu = crate::device::gpu_name(device).unwrap_or_else(|| "GPU".into());
        let (wide_from, wide_source) = crate::gpu::wide::wide_rows_for(&gpu, cfg, mmq);
        let wide = wide_from.and_then(|from| wide_products(dev, &layers, &lm_head, from));
        // The caches' f16 shadows, for the wide passes' attention on tensor cores.
        let shadow = match wide.is_some() && f.att_wide.is_some() {
            true => cache_shadows(&stream, &mut layers, cfg.n_kv_heads * capacity * hd),
            false => vec![],
        };
        let table: Vec<u64> = layers
            .iter()
            .filter(|l| l.gdn.is_none())
            .flat_map(|l| [l.k_cache, l.v_cache, l.k16, l.v16])
            .collect();
        let kv_table = stream.clone_htod(&table).map_err(|e| format!("{e:?}"))?;
        Ok(GpuStep {
            dev: dev.clone(),
            stream,
            f,
            layers,
            embed,
            norm,
            lm_head,
            cos,
            sin,
            kv_stride: (capacity * hd) as i64,
            h,
            nh: cfg.n_heads,
            nkv: cfg.n_kv_heads,
            hd,
            ffn: cfg.ffn,
            vocab: cfg.vocab_size,
            qkv_width,
            eps: cfg.rms_eps as f32,
            interleaved: matches!(cfg.rope_style, RopeStyle::Interleaved) as i32,
            rot: rot as i32,
            stash: None,
            bufs: None,
            graphs: HashMap::new(),
            seen: HashSet::new(),
            graphs_on: graphs_allowed(),
            graphs_failed: false,
            hidden_graphs_failed: false,
            wide_graphs_failed: false,
            cold: 0,
            tensor_cores: false,
            mmq,
            linear,
            replay_on: None,
            pdl,
            head: None,
            wide,
            wide_verify: false,
            wide_source,
            wide_now: false,
            branching_now: false,
            shadow,
            shadow_stale: false,
            kv_table,
            clock: super::clock::StageClock::when_profiling(w.layers.len()),
            _keep: keep,
        })
    }
}

/// Whether the K-quant family's products take this model's widths: the activations quantised in
/// groups of [`ACT_GROUP`] along the hidden size, the attention output and a Gated DeltaNet
/// layer's value width, with a head never split across groups.
fn mmq_fits(cfg: &ModelConfig) -> bool {
    let hd = cfg.head_dim;
    cfg.hidden.is_multiple_of(ACT_GROUP)
        && ACT_GROUP.is_multiple_of(hd)
        && (cfg.n_heads * hd).is_multiple_of(ACT_GROUP)
        && cfg
            .linear
            .as_ref()
            .is_none_or(|l| (l.v_heads * l.v_dim).is_multiple_of(ACT_GROUP))
}

/// Layer `i` of the step: its products grouped as it runs them, its norms' and small weights'
/// addresses (through `ptr`, which keeps what it converts alive), a Gated DeltaNet layer's empty
/// state on `stream`.
fn load_layer(
    i: usize,
    l: &LayerWeights,
    cfg: &ModelConfig,
    stream: &Arc<CudaStream>,
    ptr: &mut dyn FnMut(&Tensor) -> std::result::Result<u64, String>,
) -> std::result::Result<Layer, String> {
    let hd = cfg.head_dim;
    let zeros = |len: usize| stream.alloc_zeros::<f32>(len).map_err(|e| format!("{e:?}"));
    let mut qkv = vec![];
    let mut biases = vec![];
    let mut off = 0;
    for p in &l.qkv {
        let (m, b) = mat(p, &format!("layer {i} input projections"))?;
        let rows = m.rows;
        if let Some(b) = b {
            biases.push(b);
        }
        qkv.push((m, off));
        off += rows;
    }
    let (q_gated, gdn, width) = match l.mixer {
        MixerKind::Attention { gated } => {
            let q = if gated { 2 * cfg.n_heads } else { cfg.n_heads };
            (gated, None, (q + 2 * cfg.n_kv_heads) * hd)
        }
        MixerKind::GatedDelta(g) => {
            if !biases.is_empty() {
                return Err(format!("layer {i}: Gated DeltaNet projections with biases"));
            }
            let sh = g.shape();
            let [conv, a_neg, dt_bias, norm] = g.tensors().map(&mut *ptr);
            let gl = GdnLayer {
                conv: conv?,
                a_neg: a_neg?,
                dt_bias: dt_bias?,
                norm: norm?,
                s: zeros(sh.v_heads * sh.k_dim * sh.v_dim)?,
                window: zeros((sh.conv - 1) * sh.conv_channels())?,
            };
            let width = sh.conv_channels() + sh.v_heads * sh.v_dim + 2 * sh.v_heads;
            (false, Some(gl), width)
        }
    };
    if off != width || (!biases.is_empty() && biases.len() != l.qkv.len()) {
        return Err(format!("layer {i}: unexpected input projection layout"));
    }
    let qkv_bias = if biases.is_empty() {
        0
    } else {
        ptr(&Tensor::cat(&biases, 0).map_err(|e| e.to_string())?)?
    };
    let mut gate_up = vec![];
    let mut off = 0;
    for p in &l.gate_up {
        let (m, _) = mat(p, &format!("layer {i} gate/up"))?;
        let rows = m.rows;
        gate_up.push((m, off));
        off += rows;
    }
    if off != 2 * cfg.ffn {
        return Err(format!("layer {i}: unexpected gate/up layout"));
    }
    let (o, ob) = mat(l.o, &format!("layer {i} output"))?;
    let (down, db) = mat(l.down, &format!("layer {i} down"))?;
    if ob.is_some() || db.is_some() {
        return Err(format!("layer {i}: biases outside q/k/v"));
    }
    Ok(Layer {
        attn_norm: ptr(l.attn_norm)?,
        qkv,
        width,
        q_gated,
        gdn,
        qkv_bias,
        q_norm: l.q_norm.map(&mut *ptr).transpose()?.unwrap_or(0),
        k_norm: l.k_norm.map(&mut *ptr).transpose()?.unwrap_or(0),
        o,
        ffn_norm: ptr(l.ffn_norm)?,
        gate_up,
        down,
        k_cache: 0,
        v_cache: 0,
        k16: 0,
        v16: 0,
    })
}

/// Graphs unless `TREESPEC_CUDA_GRAPHS=0`.
pub(super) fn graphs_allowed() -> bool {
    std::env::var("TREESPEC_CUDA_GRAPHS").as_deref() != Ok("0")
}

pub(super) fn profile_replays() -> Option<usize> {
    std::env::var("TREESPEC_STEP_PROFILE")
        .ok()?
        .parse()
        .ok()
        .filter(|&n| n > 0)
}

/// candle's launch shape for its `get_rows_*` kernels: (block size, grid rows).
pub(super) fn get_rows_shape(dtype: GgmlDType, h: usize) -> (usize, usize) {
    match dtype {
        GgmlDType::Q2K | GgmlDType::Q3K | GgmlDType::Q5K | GgmlDType::Q6K => {
            (64, h / dtype.block_size())
        }
        GgmlDType::Q4K => (32, h / dtype.block_size()),
        _ => (256, h.div_ceil(512).min(u16::MAX as usize)),
    }
}

pub(super) fn get_rows_name(dtype: GgmlDType) -> Option<&'static str> {
    Some(match dtype {
        GgmlDType::Q4_0 => "get_rows_q4_0",
        GgmlDType::Q4_1 => "get_rows_q4_1",
        GgmlDType::Q5_0 => "get_rows_q5_0",
        GgmlDType::Q5_1 => "get_rows_q5_1",
        GgmlDType::Q8_0 => "get_rows_q8_0",
        GgmlDType::Q2K => "get_rows_q2_K",
        GgmlDType::Q3K => "get_rows_q3_K",
        GgmlDType::Q4K => "get_rows_q4_K",
        GgmlDType::Q5K => "get_rows_q5_K",
        GgmlDType::Q6K => "get_rows_q6_K",
        _ => return None,
    })
}

/// Every weight matrix of the step's products.
pub(super) fn weights<'a>(layers: &'a [Layer], lm_head: &'a Mat) -> impl Iterator<Item = &'a Mat> {
    layers
        .iter()
        .flat_map(|l| {
            l.qkv
                .iter()
                .map(|(m, _)| m)
                .chain(l.gate_up.iter().map(|(m, _)| m))
                .chain([&l.o, &l.down])
        })
        .chain([lm_head])
}

pub(super) fn load_funcs(
    dev: &candle_core::CudaDevice,
    layers: &[Layer],
    lm_head: &Mat,
    embed: &Embed,
    (tensor_cores, k_quant): (bool, bool),
    (head_dim, group): (usize, usize),
) -> Result<Funcs> {
    let step =
        |name: &str| -> Result<CudaFunction> { crate::gpu::modules::func(dev, Module::Rows, name) };
    // The dp4a kernels (single or stacked) for the formats of `mats`.
    let dp4a = |mats: &mut dyn Iterator<Item = &Mat>, stacked: bool| -> Result<_> {
        let mut funcs = HashMap::new();
        for m in mats {
            for kernel in Dp4a::ALL {
                if let std::collections::hash_map::Entry::Vacant(slot) =
                    funcs.entry((m.tag, kernel))
                {
                    slot.insert(mmvq_func(dev, m.tag, kernel, stacked)?);
                }
            }
        }
        Ok(funcs)
    };
    let mmvq = dp4a(&mut weights(layers, lm_head), false)?;
    let mut stackable = layers
        .iter()
        .flat_map(|l| l.qkv.iter().chain(&l.gate_up))
        .map(|(m, _)| m);
    let mmvq_stacked = dp4a(&mut stackable, true)?;
    let (mut mmtc, mut mmq) = (HashMap::new(), HashMap::new());
    for tag in ["q4_k", "q6_k"].into_iter().filter(|_| tensor_cores) {
        for kernel in Mmtc::all() {
            mmtc.insert((tag, kernel), mmtc_func(dev, tag, kernel)?);
        }
        for kernel in Mmq::ALL.into_iter().filter(|_| k_quant) {
            mmq.insert((tag, kernel), mmq_func(dev, tag, kernel)?);
        }
    }
    let get_rows = match embed {
        Embed::Quantized { dtype, .. } => {
            let name = get_rows_name(*dtype).ok_or_else(|| {
                Error::Device(format!("no GPU row lookup for a {dtype:?} embedding"))
            })?;
            Some(
                dev.get_or_load_func(name, &candle_kernels::QUANTIZED)?
                    .into_cuda_function(),
            )
        }
        Embed::Dense(_) => None,
    };
    Ok(Funcs {
        norm_q8: step("norm_q8")?,
        qkv_rope: step("qkv_rope")?,
        silu_mul_q8: step("silu_mul_q8")?,
        gather_rows: step("gather_rows")?,
        att_chunk: {
            let f = crate::gpu::modules::func(dev, Module::Attention, "attention_chunk_f32")?;
            crate::gpu::attention::allow_chunk_smem(&f, group, head_dim).map_err(driver)?;
            f
        },
        att_combine: crate::gpu::modules::func(dev, Module::Attention, "attention_combine_f32")?,
        // f16 MMA: on GPUs of sm_80 on (`tensor_cores`) in a build for them.
        att_wide: match crate::gpu::attention::wide_kernel(head_dim) {
            Some(name) if tensor_cores => {
                let f = crate::gpu::modules::func(dev, Module::Attention, &name)?;
                // Without its shared memory the kernel cannot run: wide passes then attend
                // row by row, the rest of the step unchanged.
                match crate::gpu::attention::allow_wide_smem(&f, head_dim) {
                    Ok(()) => Some(f),
                    Err(e) => {
                        eprintln!("treespec: {name} cannot have its shared memory ({e:?})");
                        None
                    }
                }
            }
            _ => None,
        },
        kv_keep: step("kv_keep")?,
        quant_rows: step("quant_rows")?,
        gdn: match layers.iter().any(|l| l.gdn.is_some()) {
            true => {
                let g = |name: &str| crate::gpu::modules::func(dev, Module::Gdn, name);
                Some(GdnFuncs {
                    conv: g("gdn_conv")?,
                    trees: crate::gpu::gdn::TREE_KERNELS
                        .iter()
                        .flatten()
                        .map(|&k| {
                            let f = g(k)?;
                            crate::gpu::gdn::cuda::allow_tree_shared(&f)?;
                            Ok((k, f))
                        })
                        .collect::<Result<_>>()?,
                    norm: g("gdn_norm")?,
                    window: g("gdn_window")?,
                    commit: g("gdn_commit")?,
                })
            }
            false => None,
        },
        mmvq,
        mmvq_stacked,
        mmtc,
        mmq,
        get_rows,
    })
}

/// f16 copies of the weights for passes of `from` rows or more (cuBLAS), the matrices that share
/// an input back to back (one GEMM each); `None`, with one line saying why, where they could
/// not be made.
fn wide_products(
    dev: &candle_core::CudaDevice,
    layers: &[Layer],
    lm_head: &Mat,
    from: usize,
) -> Option<WideProducts> {
    fn group<'a>(ms: &[&'a Mat]) -> Vec<(u64, &'a Arc<QTensor>)> {
        ms.iter().map(|m| (m.ptr, &m._keep)).collect()
    }
    let mut groups: Vec<Vec<_>> = vec![];
    for l in layers {
        groups.push(group(&l.qkv.iter().map(|(m, _)| m).collect::<Vec<_>>()));
        groups.push(group(&[&l.o]));
        groups.push(group(&l.gate_up.iter().map(|(m, _)| m).collect::<Vec<_>>()));
        groups.push(group(&[&l.down]));
    }
    groups.push(group(&[lm_head]));
    match WideProducts::new(dev, groups, from) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("treespec: no cuBLAS products for wide passes: {e}");
            None
        }
    }
}

/// f16 shadows of the attention layers' K and V caches (`size` values each), their addresses
/// set in `layers`; none, with one line saying why, where they do not fit.
fn cache_shadows(
    stream: &Arc<CudaStream>,
    layers: &mut [Layer],
    size: usize,
) -> Vec<CudaSlice<u16>> {
    let attention = layers.iter().filter(|l| l.gdn.is_none()).count();
    let made: std::result::Result<Vec<_>, _> = (0..2 * attention)
        .map(|_| stream.alloc_zeros::<u16>(size))
        .collect();
    match made {
        Ok(made) => {
            let attending = layers.iter_mut().filter(|l| l.gdn.is_none());
            for (l, kv) in attending.zip(made.chunks(2)) {
                l.k16 = kv[0].device_ptr(stream).0;
                l.v16 = kv[1].device_ptr(stream).0;
            }
            made
        }
        Err(e) => {
            eprintln!(
                "treespec: no f16 copy of the K/V cache ({e:?}): wide passes attend row by row"
            );
            vec![]
        }
    }
}

/// The attention layers' K/V cache addresses: the caches are written in place, their own
/// storage, never a copy, so they must be contiguous f32.
fn set_caches(
    layers: &mut [Layer],
    caches: &[(&Tensor, &Tensor)],
    stream: &Arc<CudaStream>,
) -> std::result::Result<(), String> {
    for (layer, (kc, vc)) in layers.iter_mut().zip(caches) {
        if layer.gdn.is_some() {
            continue;
        }
        if !kc.is_contiguous() || !vc.is_contiguous() || kc.dtype() != candle_core::DType::F32 {
            return Err("KV cache not contiguous f32".into());
        }
        layer.k_cache = tensor_ptr(kc, stream)?;
        layer.v_cache = tensor_ptr(vc, stream)?;
    }
    Ok(())
}

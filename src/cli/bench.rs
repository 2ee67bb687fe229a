//! `treespec bench`: prompt sets through every mode, the cost table (`--costs`), the product timings
//! (`--products`) and the wide crossover (`--calibrate`).

use super::*;

#[cfg(feature = "cuda")]
pub(crate) fn run_products(a: &BenchArgs) -> anyhow::Result<()> {
    let opts = a.runtime.load_options()?;
    let candle_core::Device::Cuda(dev) = &opts.device else {
        anyhow::bail!("--products times GPU kernels: pass --device cuda");
    };
    print!("{}", treespec::gpu::products::bench_products(dev)?);
    Ok(())
}

#[cfg(not(feature = "cuda"))]
pub(crate) fn run_products(_: &BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "--products times GPU kernels: this build has no CUDA (build with --features cuda)"
    )
}

pub(crate) fn run_costs(a: &BenchArgs) -> anyhow::Result<()> {
    if a.cost_rows.contains(&0) {
        anyhow::bail!("--cost-rows: a verify pass has at least one row");
    }
    let opts = a.runtime.load_options()?;
    // The target as it verifies (`load::build_engine` with a drafter): its products chosen so.
    let as_target = LoadOptions {
        verifies: true,
        ..opts.clone()
    };
    let mut t = load::load_model(&a.target, &as_target)?;
    let prefix = a.cost_prefix;
    if prefix == 0 || prefix >= t.decoder.context() {
        anyhow::bail!(
            "--cost-prefix {prefix}: the context holds {} tokens (raise it with --context)",
            t.decoder.context()
        );
    }
    if a.calibrate {
        return calibrate_wide(&mut t, &a.runtime.device, prefix);
    }
    let drafter = a.drafter.as_deref().unwrap_or(treespec::fetch::DRAFTER.key);
    if let Some(dir) = load::dflash_dir(&load::model_path(drafter)?)? {
        return dflash_costs(a, &mut t, &dir, &opts);
    }
    // As a drafter runs (`load::load_drafter`): its products on dp4a unless told otherwise.
    let as_drafter = LoadOptions {
        tensor_cores: treespec::gpu::step::tensor_cores_for(true),
        verifies: false,
        ..opts.clone()
    };
    let mut d = load::load_model(drafter, &as_drafter)?;
    let rows = bench::measure_costs(
        &mut t.decoder,
        Some(&mut d.decoder),
        prefix,
        &a.cost_rows,
        7,
    )?;
    let header = format!(
        "target {} ({}), drafter {}, device {}, context {prefix} tokens",
        t.name,
        t.decoder.runtime(),
        d.name,
        a.runtime.device
    );
    print_costs(a, &header, &rows)
}

/// A cost table under its header line, and as JSON where `--json` asks.
pub(crate) fn print_costs(
    a: &BenchArgs,
    header: &str,
    rows: &[bench::CostRow],
) -> anyhow::Result<()> {
    println!("{header}\n");
    println!("{}", bench::costs_markdown(rows));
    if treespec::profile::enabled() {
        // With TREESPEC_CUDA_GRAPHS=0 too: the GPU step's stages, per pass size.
        eprint!("{}", treespec::profile::report());
    }
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(rows)?)?;
    }
    Ok(())
}

/// `bench --costs` with a DFlash drafter: the target's decode step and verify passes, then a
/// DDTree round's pieces with that drafter (`bench::measure_dflash_costs`).
pub(crate) fn dflash_costs(
    a: &BenchArgs,
    t: &mut treespec::model::LoadedModel,
    dir: &std::path::Path,
    opts: &LoadOptions,
) -> anyhow::Result<()> {
    let mut d = load::load_dflash(dir, t, opts)?;
    let prefix = a.cost_prefix;
    let mut rows = bench::measure_costs(&mut t.decoder, None, prefix, &a.cost_rows, 7)?;
    let step = rows.first().map_or(1.0, |r| r.ms);
    rows.extend(bench::measure_dflash_costs(
        &mut t.decoder,
        &mut d,
        prefix,
        &a.cost_rows,
        (step, 7),
    )?);
    let header = format!(
        "target {} ({}), DFlash drafter {} ({} layers, blocks of {}), device {}, context {prefix} tokens, rounds committing {} positions",
        t.name,
        t.decoder.runtime(),
        d.name(),
        d.config().model.n_layers,
        d.config().block_size,
        a.runtime.device,
        bench::ROUND_COMMITS
    );
    print_costs(a, &header, &rows)
}

/// `bench --costs --calibrate`: verify passes of 4 to 64 rows timed through the quantised kernels
/// and through cuBLAS after `prefix` tokens, the crossover chosen from them recorded for this GPU
/// and the target's shape (`gpu::crossover`).
pub(crate) fn calibrate_wide(
    t: &mut treespec::model::LoadedModel,
    device: &str,
    prefix: usize,
) -> anyhow::Result<()> {
    use treespec::gpu::crossover;
    let dev = t.decoder.device().clone();
    let Some(gpu) = treespec::device::gpu_name(&dev) else {
        anyhow::bail!("--calibrate: {device} is not a GPU");
    };
    if !t.decoder.set_wide_from(usize::MAX) {
        anyhow::bail!(
            "--calibrate: {} has no cuBLAS products on this GPU (TREESPEC_WIDE_ROWS=0, no room for the f16 copies, or a calibration found they never win: TREESPEC_WIDE_ROWS=1 measures again)",
            t.name
        );
    }
    let sizes = [4usize, 8, 16, 32, 64];
    // Verify-shaped passes (every row's logits), as `--wide-verify` sends them.
    t.decoder.set_wide_verify(true);
    let quantised = bench::measure_costs(&mut t.decoder, None, prefix, &sizes, 7)?;
    t.decoder.set_wide_from(1);
    let wide = bench::measure_costs(&mut t.decoder, None, prefix, &sizes, 7)?;
    t.decoder.set_wide_verify(false);
    let ms = |rows: &[bench::CostRow], n: usize| {
        rows.iter()
            .skip(1) // the decode step
            .find(|r| r.rows == n)
            .map(|r| r.ms)
    };
    let table: Vec<(usize, f64, f64)> = sizes
        .iter()
        .filter_map(|&n| Some((n, ms(&quantised, n)?, ms(&wide, n)?)))
        .collect();
    let cal = crossover::Calibration::of(table);
    let key = crossover::key(&gpu, t.decoder.config(), t.decoder.step_family());
    let path = crossover::path();
    crossover::record_in(&path, &key, &cal)?;
    println!(
        "{} on {gpu}, verify passes after {prefix} tokens:\n",
        t.name
    );
    println!("| rows | quantised kernels, ms | cuBLAS, ms |\n| ---: | ---: | ---: |");
    for (n, q, w) in &cal.table {
        println!("| {n} | {q:.2} | {w:.2} |");
    }
    match cal.from {
        Some(from) => println!("\ncuBLAS from {from} rows, recorded in {}", path.display()),
        None => println!(
            "\ncuBLAS lost at every size: recorded (no f16 copies from now on) in {}",
            path.display()
        ),
    }
    Ok(())
}

pub(crate) fn run_bench(a: BenchArgs) -> anyhow::Result<()> {
    if a.costs {
        return run_costs(&a);
    }
    if a.products {
        return run_products(&a);
    }
    let base = a.decode.settings(Mode::Ar)?;
    let variants = a
        .modes
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| bench::Variant::parse(s, &base))
        .collect::<treespec::Result<Vec<_>>>()?;
    let needs_drafter = variants.iter().any(|v| v.settings.mode.uses_drafter());
    let sets = if a.prompts.is_empty() {
        bench::bundled_prompts(a.limit)?
    } else {
        a.prompts
            .iter()
            .map(|p| bench::load_prompts(p, a.limit))
            .collect::<treespec::Result<Vec<_>>>()?
    };
    let sets = match a.by_category {
        true => bench::by_category(sets),
        false => sets,
    };
    let settings = a.decode.settings(Mode::Ar)?;
    let wants_mtp = variants
        .iter()
        .any(|v| matches!(v.settings.mode, Mode::Mtp | Mode::Auto));
    let head = match wants_mtp {
        true => load::head_for(&a.target, a.head.head.as_deref()),
        false => Some(load::NO_HEAD.to_string()),
    };
    let (mut engine, m) = build_engine(
        &a.target,
        (
            match needs_drafter {
                true => match a.drafter.as_deref() {
                    None => DrafterChoice::Auto,
                    Some("none") => DrafterChoice::None,
                    Some(d) => DrafterChoice::Named(d),
                },
                false => DrafterChoice::None,
            },
            head.as_deref(),
        ),
        settings,
        a.decode.seed,
        &a.runtime,
    )?;
    let cfg = BenchConfig {
        variants,
        max_tokens: a.max_tokens,
        seed: a.decode.seed,
    };
    let report = bench::run(
        &mut engine,
        &m.tokenizer,
        &m.template,
        &sets,
        &cfg,
        |line| eprintln!("{line}"),
    )?;
    println!("{}", bench::markdown(&report));
    if treespec::profile::enabled() {
        // Totals over every mode measured: profile one mode at a time to attribute it.
        eprint!("{}", treespec::profile::report());
    }
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if settings.sampling.is_greedy() {
        let required = a.runtime.exact || a.require_identical;
        match bench::identical_verdict(report.first_divergence(), required) {
            Ok(line) => eprintln!("{line}"),
            Err(message) => anyhow::bail!(message),
        }
    }
    Ok(())
}

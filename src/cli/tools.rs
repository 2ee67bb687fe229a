//! The other commands: generate, fetch, selftest, synth, train-drafter, export-head.

use super::*;

pub(crate) fn run_generate(a: GenerateArgs) -> anyhow::Result<()> {
    let mode = parse_mode(&a.mode)?;
    let settings = a.decode.settings(mode)?;
    // The head only where it drafts: `mtp`, and `auto` among its arms.
    let head = match mode {
        Mode::Mtp | Mode::Auto => load::head_for(&a.model, a.head.head.as_deref()),
        _ => Some(load::NO_HEAD.to_string()),
    };
    let drafter = match (&a.drafter, mode) {
        (Some(d), _) => DrafterChoice::Named(d),
        // `mtp` with a head needs no other drafter.
        (None, Mode::Mtp) if head.as_deref().is_some_and(|h| h != load::NO_HEAD) => {
            DrafterChoice::None
        }
        (None, Mode::Mtp) => anyhow::bail!(
            "--mode mtp needs an MTP head: --head FILE, or --drafter mtp for the target's own"
        ),
        // The target's own head, or a drafter of its vocabulary already in the cache.
        (None, m) if m.uses_drafter() => DrafterChoice::Auto,
        (None, _) => DrafterChoice::None,
    };
    let (mut engine, m) = build_engine(
        &a.model,
        (drafter, head.as_deref()),
        settings,
        a.decode.seed,
        &a.runtime,
    )?;
    let text = if a.raw {
        a.prompt.clone()
    } else {
        let mut msgs = vec![];
        if let Some(s) = &a.system {
            msgs.push(ChatMessage::new(Role::System, s.clone()));
        }
        msgs.push(ChatMessage::new(Role::User, a.prompt.clone()));
        m.template.render(&msgs, true)?
    };
    for n in &m.notes {
        eprintln!("treespec: {n}");
    }
    let ids = m.tokenizer.encode(&text, true)?;
    let mut stdout = std::io::stdout().lock();
    let (_, stats) = generate(&mut engine, &m.tokenizer, &ids, a.max_tokens, |piece| {
        let _ = stdout.write_all(piece.as_bytes());
        let _ = stdout.flush();
    })?;
    let _ = writeln!(stdout);
    drop(stdout);
    eprintln!(
        "[{} {}, {}] {}",
        m.name,
        mode,
        engine.target().runtime(),
        stats.summary()
    );
    Ok(())
}

pub(crate) fn run_fetch(a: FetchArgs) -> anyhow::Result<()> {
    let list: Vec<fetch::KnownModel> = if a.all {
        fetch::KNOWN.to_vec()
    } else if a.models.is_empty() {
        vec![fetch::TARGET, fetch::DRAFTER]
    } else {
        a.models
            .iter()
            .map(|k| {
                fetch::known(k).ok_or_else(|| {
                    anyhow::anyhow!("unknown model `{k}` (known: target, drafter, smollm2)")
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    for m in list {
        let p = fetch::ensure(&m).with_context(|| format!("fetching {}", m.description))?;
        println!("{}", p.display());
        // The MTP head shipped for it, into the cache beside it.
        if let Some(h) = fetch::shipped_head(m.key) {
            match fetch::ensure_head(&h) {
                Ok(p) => println!("{}", p.display()),
                Err(e) => eprintln!("treespec: `mtp` unavailable: {e}"),
            }
        }
    }
    Ok(())
}

/// The text the model checks of `selftest` run through each model.
pub(crate) const SELFTEST_TEXT: &str = "def is_prime(n):\n    if n < 2:\n        return False\n    for i in range(2, int(n ** 0.5) + 1):\n        if n % i == 0:\n            return False\n    return True\n\nThe function above checks whether a number is prime by trial division up to its square root.";

pub(crate) fn run_selftest(a: SelftestArgs) -> anyhow::Result<()> {
    if a.head.is_some() && a.models.is_empty() {
        anyhow::bail!("--head is checked over a target: give one with -m");
    }
    let dev = device::parse_device(&a.device)?;
    for line in treespec::model::step_check::selftest(&dev)? {
        println!("{line}");
    }
    for spec in &a.models {
        // Its products as the chat runs them: verifying the default head's or drafter's drafts.
        let opts = LoadOptions {
            device: dev.clone(),
            verifies: true,
            ..LoadOptions::default()
        };
        let mut m = load::load_model(spec, &opts)?;
        let mut cpu = load::load_model(spec, &LoadOptions::default())?;
        let ids = m.tokenizer.encode(SELFTEST_TEXT, false)?;
        for line in
            treespec::model::step_check::check_model(&mut m.decoder, &mut cpu.decoder, &ids)?
        {
            println!("{}: {line}", m.name);
        }
        if let (Some(path), true) = (&a.head, Some(spec) == a.models.first()) {
            let (cfg, context) = (m.decoder.config().clone(), m.decoder.context());
            // `mtp`: the target's own head; else a head file from `export-head`.
            let mut head = if path.as_os_str() == load::MTP_DRAFTER {
                treespec::model::load_mtp_head(&m.files, &cfg, 0, &opts, context)?
            } else {
                let header = treespec::model::weights::read_gguf_header(path)?;
                treespec::model::mtp_gguf::load(path, header, &m.name, &cfg, &opts, context)?
            };
            for line in head.check_gpu_step(&mut m.decoder, &ids)? {
                println!("{}: {line}", path.display());
            }
        }
    }

    println!(
        "selftest on {}: every kernel matches its reference",
        a.device
    );
    Ok(())
}

pub(crate) fn run_synth(a: SynthArgs) -> anyhow::Result<()> {
    let shape = treespec::synth::shape(&a.shape)?;
    if a.dflash {
        treespec::synth::write_dflash(&shape, &a.out, a.seed)?;
        println!(
            "wrote {} (a random DFlash drafter for a {} target: {} layers of hidden {}, blocks of {}; for timing only)",
            a.out.display(),
            shape.name,
            treespec::synth::DFLASH_LAYERS,
            shape.hidden,
            treespec::synth::DFLASH_BLOCK
        );
        return Ok(());
    }
    let tokenizer = a
        .tokenizer_from
        .as_deref()
        .map(treespec::synth::tokenizer_from)
        .transpose()?;
    treespec::synth::write(&shape, &a.out, a.seed, tokenizer.as_ref())?;
    let vocab = tokenizer.as_ref().map_or(shape.vocab, |t| t.vocab);
    let from = match &a.tokenizer_from {
        Some(p) => format!(" (the tokenizer of {})", p.display()),
        None => String::new(),
    };
    println!(
        "wrote {} (random {}-shaped weights: {} layers, hidden {}, vocabulary {vocab}{from}; for timing only)",
        a.out.display(),
        shape.name,
        shape.layers,
        shape.hidden,
    );
    Ok(())
}

pub(crate) fn run_train(a: TrainArgs) -> anyhow::Result<()> {
    let load = a.runtime.load_options()?;
    let cfg = treespec::train::run::RunConfig {
        target: a.target,
        out: a.out,
        steps: a.steps,
        opts: treespec::train::TrainOptions {
            k: a.k,
            lr: a.lr,
            schedule: a.lr_schedule,
            batch_tokens: a.batch_tokens,
            cache_bytes: (a.cache_gib.max(0.0) * (1u64 << 30) as f64) as usize,
            ..Default::default()
        },
        data: a.data,
        extra_data: a.extra_data,
        init: a.init,
        draft_vocab: a.draft_vocab,
        feature_layers: a.feature_layers,
        self_prompts: a.self_prompts,
        self_prompt_systems: a.self_prompt_system,
        turns: a.turns,
        eval: a.eval,
        answer_tokens: a.answer_tokens,
        seed: a.seed,
        load,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    if let Some(spec) = &a.dflash {
        let run = treespec::train::dflash_run::DFlashRun {
            mask_token: a.mask_token,
            from_target: a.dflash_from_target,
            loss_decay: a.loss_decay,
            ..treespec::train::dflash_run::DFlashRun::parse(spec)?
        };
        let r = treespec::train::dflash_run::run(&cfg, &run)?;
        println!(
            "{}: step {}, held-out loss {:.3}, agreement {:.3}, tau {:.2} walked (blocks of {}, \
             {} layers reading target layers {:?}, mask token {})",
            cfg.out.display(),
            r.step,
            r.held_out_loss,
            r.held_out_agreement,
            r.walked_tau,
            r.block_size,
            r.layers,
            r.target_layer_ids,
            r.mask_token_id
        );
        for e in &r.eval {
            println!(
                "  {}: agreement {:.3}, tau {:.2} walked",
                e.set, e.agreement, e.walked_tau
            );
            for c in &e.by_category {
                println!(
                    "    {}: agreement {:.3}, tau {:.2} walked",
                    c.set, c.agreement, c.walked_tau
                );
            }
        }
        return Ok(());
    }
    let r = treespec::train::run::run(&cfg)?;
    println!(
        "{}: step {}, held-out loss {:.3}, agreement with the target by chain step {:?}, \
         tau {:.2} walked, {:.2} simulated",
        cfg.out.display(),
        r.step,
        r.held_out_loss,
        r.held_out_agreement,
        r.walked_tau,
        r.simulated_tau
    );
    for e in &r.eval {
        println!(
            "  {}: agreement by chain step {:?}, tau {:.2} walked, {:.2} simulated",
            e.set, e.agreement, e.walked_tau, e.simulated_tau
        );
    }
    let best = treespec::train::run::best_record(&cfg.out);
    if let Some(b) = best.filter(|b| b.step != r.step) {
        println!(
            "best so far: step {} (held-out tau {:.2} walked), kept in {}",
            b.step,
            b.walked_tau,
            treespec::train::run::best_path(&cfg.out).display()
        );
    }
    Ok(())
}

pub(crate) fn run_export(a: ExportArgs) -> anyhow::Result<()> {
    use treespec::model::mtp_gguf;
    let format = mtp_gguf::parse_format(&a.format)?;
    let files = treespec::model::source::resolve(&load::model_path(&a.target)?)?;
    let cfg = treespec::model::read_config(&files)?;
    let target = mtp_gguf::HeadTarget::of(&files.display_name(), &cfg);
    let mut record = a.head.clone().into_os_string();
    record.push(".json");
    // The record beside the head, or the one a GGUF head carries.
    let source = std::fs::read_to_string(&record)
        .ok()
        .or_else(|| mtp_gguf::recorded_source(&a.head))
        .unwrap_or_else(|| format!("exported from {}", a.head.display()));
    // A draft vocabulary from the data's answers: the target's stop tokens always in it.
    let vocab = match (a.draft_vocab, &a.data) {
        (Some(n), Some(data)) => {
            let answers = treespec::train::run::trained_answers(data)?;
            let tokenizer = treespec::model::load_tokenizer(&files)?;
            let ids = treespec::model::draft_vocab::most_frequent(
                answers.iter().map(Vec::as_slice),
                n,
                cfg.vocab_size,
                tokenizer.stop_ids(),
            );
            // The whole vocabulary: no set at all.
            Some(ids.unwrap_or_default())
        }
        _ => None,
    };
    let done = mtp_gguf::export_with(&a.head, &a.out, format, &target, &source, vocab.as_deref())?;
    let vocab_note = match &vocab {
        Some(ids) if ids.is_empty() => ", drafting among the whole vocabulary".to_string(),
        Some(ids) => format!(", drafting among {} tokens", ids.len()),
        None => String::new(),
    };
    println!(
        "wrote {}: {:.1} MB, {} tensors (matrices in {}){vocab_note}, an MTP head for {target}",
        a.out.display(),
        done.bytes as f64 / 1e6,
        done.tensors,
        a.format.to_ascii_lowercase()
    );
    Ok(())
}

//! The head's GPU step checked against its candle path (`treespec selftest --head`): a drafted
//! tree's rows, greedy chains in one launch, catch-up passes.

use super::*;

/// How two ways of drafting the same greedy chains agree ([`MtpHead::check_gpu_step`]).
#[derive(Default)]
struct Agreement {
    chains: usize,
    first: usize,
    agree: usize,
    depths: usize,
    worst: f32,
}

impl Agreement {
    /// Count one pair of chains: depths whose top token agrees before the first difference
    /// (later depths follow other tokens), and the largest top log-probability difference there.
    fn add(&mut self, a: &[crate::tree::DepthTopK], b: &[crate::tree::DepthTopK]) {
        self.chains += 1;
        self.depths += a.len().max(b.len());
        for (d, (x, y)) in a.iter().zip(b).enumerate() {
            if x.tokens.first() != y.tokens.first() {
                break;
            }
            self.agree += 1;
            self.first += usize::from(d == 0);
            let (p, q) = (x.log_probs.first(), y.log_probs.first());
            if let (Some(p), Some(q)) = (p, q) {
                self.worst = self.worst.max((p - q).abs());
            }
        }
    }

    fn describe(&self) -> String {
        format!(
            "depth 1 agrees on {}/{}, {}/{} depths before a first difference, top log-probability within {:.2e}",
            self.first, self.chains, self.agree, self.depths, self.worst
        )
    }

    /// `line`, or an error with it where depth 1 disagrees more than once in `one_in`.
    fn check(&self, one_in: usize, line: &str) -> Result<String> {
        if self.first * one_in < self.chains * (one_in - 1) {
            return Err(Error::Device(format!(
                "two ways of drafting the MTP head's chains disagree: {line}"
            )));
        }
        Ok(line.to_string())
    }
}

impl MtpHead {
    /// Check the head's GPU step against candle's ops on the same GPU (`treespec selftest
    /// --head`): over the target's hidden states of `tokens`, the first pass's outputs and two
    /// chain steps (the second replays a graph), the largest difference relative to the largest
    /// value and how often the LM head's top token agrees; then the greedy chain in one launch
    /// against drafting depth by depth, and the catch-up in that launch against the catch-up
    /// before it. An error when the step does not run, its top tokens agree on fewer than nine
    /// rows in ten, or a chain check fails (a chain switched off or not available is reported
    /// as such).
    pub fn check_gpu_step(&mut self, target: &mut Decoder, tokens: &[u32]) -> Result<Vec<String>> {
        use crate::model::decoder::{argmax_rows, Batch};
        let n = tokens.len();
        if n < 8 {
            return Err(Error::InvalidArgument(
                "the head check needs at least 8 tokens".into(),
            ));
        }
        if !target.device().is_cuda() {
            return Err(Error::Device(
                "the MTP head's GPU step check needs a GPU (--device cuda)".into(),
            ));
        }
        target.reset();
        let layers = self.feature_layers();
        let parts = target
            .forward(
                &Batch::causal(tokens, 0)
                    .with_logits_rows(vec![])
                    .with_hidden_layers(layers.clone()),
            )?
            .hidden;
        let hidden = fusion::side_by_side(&parts, layers.len())?;
        let hidden = self.target_hidden(target, &hidden)?;
        target.reset();
        // The first pass over the context, then chain steps fed back their own outputs.
        let run = |head: &mut MtpHead| -> Result<Vec<Tensor>> {
            head.truncate(0);
            let o = head.forward(target, &hidden.narrow(0, 0, n - 1)?, &tokens[1..])?;
            let mut outs = vec![o.clone()];
            let mut x = o.narrow(0, n - 2, 1)?;
            for &t in &tokens[..3] {
                x = head.forward(target, &x, &[t])?;
                outs.push(x.clone());
            }
            head.truncate(0);
            Ok(outs)
        };
        let step = run(self)?;
        let graphs = match &self.step {
            Some(Ok(s)) => s.hidden_graphs_on(),
            Some(Err(why)) => {
                return Err(Error::Device(format!(
                    "the MTP head does not run on the GPU step: {why}"
                )))
            }
            None => {
                return Err(Error::Device(
                    "the MTP head's GPU step was not built".into(),
                ))
            }
        };
        let built = self.step.take();
        self.step = Some(Err("checked against candle's ops".into()));
        let candle = run(self);
        self.step = built;
        let candle = candle?;
        let mut report = vec![];
        for (i, (got, want)) in step.iter().zip(&candle).enumerate() {
            let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
            let diff = (got - want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            let rows = got.dim(0)?;
            let same = argmax_rows(&target.lm_head(got)?)?
                .iter()
                .zip(argmax_rows(&target.lm_head(want)?)?)
                .filter(|(a, b)| **a == *b)
                .count();
            let what = match (i, graphs) {
                (0, _) => "first pass".to_string(),
                (_, true) => format!("chain step {i}, from a graph after the first"),
                (_, false) => format!("chain step {i}, eager (graphs off)"),
            };
            report.push(format!(
                "MTP head on the GPU step vs candle's ops, {what} ({rows} rows): max difference {:.2e} of {scale:.1}, top token agrees on {same}/{rows}",
                diff
            ));
            if same * 10 < rows * 9 {
                return Err(Error::Device(format!(
                    "the MTP head's GPU step disagrees with candle's ops: {}",
                    report.join("; ")
                )));
            }
        }
        report.push(self.check_greedy_chain(target, &hidden, tokens)?);
        report.push(self.check_catch_up(target, &hidden, tokens)?);
        Ok(report)
    }

    /// The greedy chain in one launch ([`MtpHead::greedy_chain`]) against the same chain drafted
    /// depth by depth, from every position of the context in turn (as decoding reaches them):
    /// the depths whose top token agrees, the largest difference of the top log-probability,
    /// and whether a second launch (a graph replay) repeats the first. An error where depth 1
    /// disagrees more than once in twenty or a replay differs.
    fn check_greedy_chain(
        &mut self,
        target: &Decoder,
        hidden: &Tensor,
        tokens: &[u32],
    ) -> Result<String> {
        let (n, k) = (tokens.len(), 4);
        let mut tally = Agreement::default();
        self.truncate(0);
        for p in 1..n - 1 {
            // Position p - 1 committed; its block output starts the chain.
            let y = self.block_forward(target, &hidden.narrow(0, p - 1, 1)?, &tokens[p..p + 1])?;
            let row = ChainStart::Row(&y);
            let Some(fused) = self.greedy_chain(target, row, DEPTH, k)? else {
                self.truncate(0);
                return Ok("MTP chain in one launch: off or not available for this head".into());
            };
            if fused
                != self
                    .greedy_chain(target, row, DEPTH, k)?
                    .unwrap_or_default()
            {
                return Err(Error::Device(format!(
                    "a second launch of the MTP chain at position {p} gave other tokens"
                )));
            }
            let committed = self.len();
            let mut o = self.final_norm(&y)?;
            let mut stepwise = vec![];
            for d in 0..DEPTH {
                let mut top = crate::gpu::row_top_k(&self.logits(target, &o)?, k)?.remove(0);
                tokens_of(self.draft_vocab(), &mut top.tokens);
                if d + 1 < DEPTH {
                    o = self.forward(target, &o, &top.tokens[..1])?;
                }
                stepwise.push(top);
            }
            self.truncate(committed);
            tally.add(&fused, &stepwise);
        }
        let line = format!(
            "MTP chain in one launch vs depth by depth, {} starts of {DEPTH} depths: {}",
            tally.chains,
            tally.describe()
        );
        tally.check(20, &line)
    }

    /// The catch-up pass in the chain's launch ([`ChainStart::CatchUp`]) against the catch-up
    /// through [`MtpHead::block_forward`] followed by the chain: over passes of 1-4 rows at
    /// positions through the context, the depths whose top token agrees before a first
    /// difference. An error where depth 1 disagrees more than once in ten.
    fn check_catch_up(
        &mut self,
        target: &Decoder,
        hidden: &Tensor,
        tokens: &[u32],
    ) -> Result<String> {
        let n = tokens.len();
        let mut tally = Agreement::default();
        for p in (5..n - 1).step_by(3) {
            let rows = 1 + p % 4;
            let at = p - rows; // the pass covers positions at..p
            let (h, t) = (hidden.narrow(0, at, rows)?, &tokens[at + 1..p + 1]);
            self.truncate(0);
            self.block_forward(target, &hidden.narrow(0, 0, at)?, &tokens[1..at + 1])?;
            let from = ChainStart::CatchUp {
                hidden: &h,
                tokens: t,
            };
            let Some(fused) = self.greedy_chain(target, from, DEPTH, 4)? else {
                self.truncate(0);
                return Ok("MTP catch-up in the chain's launch: off or not available".into());
            };
            self.truncate(at);
            let y = self.block_forward(target, &h, t)?;
            let y = y.narrow(0, rows - 1, 1)?;
            let apart = self
                .greedy_chain(target, ChainStart::Row(&y), DEPTH, 4)?
                .unwrap_or_default();
            tally.add(&fused, &apart);
        }
        self.truncate(0);
        let line = format!(
            "MTP catch-up in the chain's launch vs before it, {} passes of 1-4 rows: {}",
            tally.chains,
            tally.describe()
        );
        tally.check(10, &line)
    }
}

//! Decoding settings: the mode, the tree and chain shapes, the sampler, with their defaults and
//! limits. [`Settings::validate`] is the one check every entry point (command line, config file,
//! keys, slash commands, the engine itself) goes through.

use crate::error::{Error, Result};
use crate::sampling::SamplingParams;
use crate::verify::Verification;

/// How tokens are proposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Plain decoding: one target token per step.
    Ar,
    /// A drafter chain verified linearly.
    Linear,
    /// A DDTree verified in one pass under a tree mask, then walked.
    Tree,
    /// The target's own multi-token-prediction head as drafter.
    Mtp,
    /// Per step, whichever of `ar`, `linear` and `tree` has been fastest here (see
    /// [`crate::engine::auto`]).
    Auto,
}

impl Mode {
    /// All modes, in the order a user cycles through them.
    pub const ALL: [Mode; 5] = [Mode::Ar, Mode::Linear, Mode::Tree, Mode::Mtp, Mode::Auto];

    /// The mode's name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Ar => "ar",
            Mode::Linear => "linear",
            Mode::Tree => "tree",
            Mode::Mtp => "mtp",
            Mode::Auto => "auto",
        }
    }

    /// Parse a mode name.
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s.trim().to_ascii_lowercase())
    }

    /// True when the mode cannot run without a drafter (a drafter model or the target's MTP head).
    pub fn needs_drafter(self) -> bool {
        matches!(self, Mode::Linear | Mode::Tree | Mode::Mtp)
    }

    /// True when the mode drafts with the drafter when there is one (`auto` may draft, or not).
    pub fn uses_drafter(self) -> bool {
        self.needs_drafter() || self == Mode::Auto
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Decoding settings; any of them may change between steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// How tokens are proposed.
    pub mode: Mode,
    /// Tree nodes (the root not counted) for `tree`.
    pub budget: usize,
    /// Tree depth for `tree`.
    pub depth: usize,
    /// Chain length for `linear`.
    pub gamma: usize,
    /// Chain length (k) for `mtp`: the MTP head's chain, verified linearly.
    pub mtp_k: usize,
    /// The target's sampler (and the drafter's, for sampled chains).
    pub sampling: SamplingParams,
    /// A causal drafter stops its greedy chain once its own probability of the chain falls
    /// below this (0: always draft the full depth); see [`crate::draft::CausalDrafter::draft`].
    pub min_chain_prob: f32,
    /// `tree` with a causal drafter: 0 builds the DDTree from the per-depth distributions of the
    /// drafter's greedy chain; W > 0 lets the drafter grow the tree itself, expanding the W most
    /// probable nodes of each depth in one pass (see [`crate::draft::expand`]).
    pub expand: usize,
    /// The acceptance rule (always lossless outside the tests).
    pub verification: Verification,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: Mode::Tree,
            budget: DEFAULT_BUDGET,
            depth: DEFAULT_DEPTH,
            gamma: DEFAULT_GAMMA,
            mtp_k: DEFAULT_MTP_K,
            sampling: SamplingParams::greedy(),
            min_chain_prob: DEFAULT_MIN_CHAIN_PROB,
            expand: DEFAULT_EXPAND,
            verification: Verification::Lossless,
        }
    }
}

/// Default tree budget. Chosen on the CPU from measurement (BENCHMARKS.md): a drafter step costs
/// about 0.4 of a target step there and each extra verified row about 0.1, so small trees over
/// deep, confidence-stopped chains win.
pub const DEFAULT_BUDGET: usize = 8;
/// Default (largest) tree depth; the chain usually stops earlier (see `DEFAULT_MIN_CHAIN_PROB`).
pub const DEFAULT_DEPTH: usize = 8;
/// Default (largest) chain length for `linear`: 7, so that a full chain and its root verify as 8
/// rows, two whole four-row chunks of the GPU's batch-invariant product kernel (9 rows take three).
/// Measured side by side against 8 (BENCHMARKS.md, section 14): H200 1.05x / 0.93x / 0.87x against
/// 1.00x / 0.89x / 0.85x of `ar` on HumanEval / GSM8K / chat; this CPU (AVX2) 1.06x / 0.95x / 0.82x
/// against 1.04x / 0.92x / 0.82x.
pub const DEFAULT_GAMMA: usize = 7;
/// Default chain length of `mtp`: 3. An MTP head's chain beyond three depths is rarely taken
/// whole, and its verify pass of up to four rows is one multi-row product on the GPU. Measured
/// (BENCHMARKS.md sections 24-26): on the H200 k=3 beat k=4 on every set; on this CPU k=3 ran at
/// 1.66x / 1.33x / 1.29x `ar` on HumanEval / GSM8K / chat against k=4's 1.38x / 1.24x / 1.18x.
pub const DEFAULT_MTP_K: usize = 3;
/// Default confidence below which a causal drafter's chain stops: deep chains where the drafter
/// is sure (code), short ones where it is not (open chat).
pub const DEFAULT_MIN_CHAIN_PROB: f32 = 0.4;

/// Default expansion width of a grown tree (0: the DDTree over the greedy chain's per-depth
/// distributions).
pub const DEFAULT_EXPAND: usize = 0;

/// Largest tree budget (nodes besides the root): a node's ancestors fit a bitmask of 1024 bits.
pub const MAX_BUDGET: usize = 1024;
/// Largest tree depth and chain length.
pub const MAX_DEPTH: usize = 64;
/// Largest expansion width of a grown tree.
pub const MAX_EXPAND: usize = 64;
/// Tree budgets the chat's budget keys step through.
pub const BUDGET_STEPS: [usize; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

impl Settings {
    /// Check every value against its limit; the error names the setting and its range.
    pub fn validate(&self) -> Result<()> {
        let range = |name: &str, v: usize, lo: usize, hi: usize| -> Result<()> {
            if v < lo || v > hi {
                return Err(Error::Config(format!(
                    "{name} must be between {lo} and {hi}, not {v}"
                )));
            }
            Ok(())
        };
        range("budget", self.budget, 1, MAX_BUDGET)?;
        range("depth", self.depth, 1, MAX_DEPTH)?;
        range("gamma", self.gamma, 1, MAX_DEPTH)?;
        range("mtp k", self.mtp_k, 1, MAX_DEPTH)?;
        range("expand", self.expand, 0, MAX_EXPAND)?;
        let p = &self.sampling;
        if !SamplingParams::temperature_ok(p.temperature) {
            return Err(Error::Config(format!(
                "temperature must be a finite number >= 0, not {}",
                p.temperature
            )));
        }
        if !SamplingParams::top_p_ok(p.top_p) {
            return Err(Error::Config(format!(
                "top-p must be in (0, 1], not {}",
                p.top_p
            )));
        }
        if !(0.0..=1.0).contains(&self.min_chain_prob) {
            return Err(Error::Config(format!(
                "min-chain-prob must be in [0, 1], not {}",
                self.min_chain_prob
            )));
        }
        Ok(())
    }

    /// The name of the chain the step keys and `/gamma` change in this mode: `k` (the MTP
    /// head's, [`Settings::mtp_k`]) in `mtp`, else `gamma` (`linear`'s).
    pub fn chain_name(&self) -> &'static str {
        if self.mode == Mode::Mtp {
            "k"
        } else {
            "gamma"
        }
    }

    /// That chain's length ([`Settings::chain_name`]).
    pub fn chain_mut(&mut self) -> &mut usize {
        if self.mode == Mode::Mtp {
            &mut self.mtp_k
        } else {
            &mut self.gamma
        }
    }

    /// A short description of the shape, as the status bar and `bench` show it: `B8 L8`,
    /// `B32 L6 W4`, `γ8`, with ` p≥0.4` when chains stop below a confidence.
    pub fn shape(&self) -> String {
        let mut s = match self.mode {
            Mode::Tree if self.expand > 0 => {
                format!("B{} L{} W{}", self.budget, self.depth, self.expand)
            }
            Mode::Tree => format!("B{} L{}", self.budget, self.depth),
            Mode::Linear => format!("γ{}", self.gamma),
            Mode::Mtp => format!("k={}", self.mtp_k),
            Mode::Ar => String::new(),
            Mode::Auto => format!("≤ B{} L{} γ{}", self.budget, self.depth, self.gamma),
        };
        if self.min_chain_prob > 0.0 && matches!(self.mode, Mode::Tree | Mode::Linear | Mode::Mtp) {
            s.push_str(&format!(" p≥{}", self.min_chain_prob));
        }
        s
    }
}

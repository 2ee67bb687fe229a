//! A configuration to measure, parsed from `ar`, `linear:G`, `tree:BxL[wW][@P]`.

use crate::engine::{Mode, Settings};
use crate::error::{Error, Result};

/// One decoding configuration to measure: a mode with its shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    /// Label in the tables (`ar`, `linear`, `tree`, or with a shape: `tree:16x4`, `linear:6`).
    pub label: String,
    /// Settings it runs with.
    pub settings: Settings,
}

impl Variant {
    /// Parse `ar`, `linear`, `tree`, `linear:G`, `tree:BxL` or `tree:BxLwW` (a tree the drafter
    /// grows, expanding W nodes per depth), optionally followed by `@P` (the drafter's chain stops
    /// below probability P); bare modes take the shape of `base`.
    pub fn parse(spec: &str, base: &Settings) -> Result<Variant> {
        let spec = spec.trim();
        let (spec_shape, prob) = match spec.split_once('@') {
            Some((a, p)) => (
                a,
                Some(p.parse::<f32>().map_err(|_| {
                    Error::InvalidArgument(format!("`{spec}`: @P takes a probability"))
                })?),
            ),
            None => (spec, None),
        };
        let (mode_s, shape) = match spec_shape.split_once(':') {
            Some((m, s)) => (m, Some(s)),
            None => (spec_shape, None),
        };
        let mode = Mode::parse(mode_s)
            .ok_or_else(|| Error::InvalidArgument(format!("unknown mode `{mode_s}`")))?;
        let mut settings = Settings { mode, ..*base };
        if let Some(p) = prob {
            settings.min_chain_prob = p;
        }
        let bad = || {
            Error::InvalidArgument(format!(
                "`{spec}`: write linear:GAMMA, mtp:K or tree:BUDGETxDEPTH[wWIDTH]"
            ))
        };
        match (mode, shape) {
            (_, None) => {}
            (Mode::Linear, Some(g)) => settings.gamma = g.parse().map_err(|_| bad())?,
            (Mode::Mtp, Some(k)) => settings.mtp_k = k.parse().map_err(|_| bad())?,
            (Mode::Tree, Some(s)) => {
                let (b, l) = s.split_once('x').ok_or_else(bad)?;
                let (l, w) = match l.split_once('w') {
                    Some((l, w)) => (l, Some(w)),
                    None => (l, None),
                };
                settings.budget = b.parse().map_err(|_| bad())?;
                settings.depth = l.parse().map_err(|_| bad())?;
                if let Some(w) = w {
                    settings.expand = w.parse().map_err(|_| bad())?;
                }
            }
            _ => return Err(bad()),
        }
        if settings.budget == 0 || settings.depth == 0 || settings.gamma == 0 || settings.mtp_k == 0
        {
            return Err(bad());
        }
        let mut label = match mode {
            Mode::Linear => format!("linear γ{}", settings.gamma),
            Mode::Mtp => format!("mtp k={}", settings.mtp_k),
            Mode::Tree if settings.expand > 0 => format!(
                "tree B{} L{} W{}",
                settings.budget, settings.depth, settings.expand
            ),
            Mode::Tree => format!("tree B{} L{}", settings.budget, settings.depth),
            m => m.name().to_string(),
        };
        if settings.min_chain_prob > 0.0 && mode != Mode::Ar {
            label.push_str(&format!(" p≥{}", settings.min_chain_prob));
        }
        Ok(Variant { label, settings })
    }
}

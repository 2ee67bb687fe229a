//! What a head is measured by as it trains: loss, agreement with the target by chain step and
//! the walk of greedy chains, summed over sequences so that a set's figures are its categories'
//! sums ([`FigureSums`]), and the evaluation sets' sequences grouped by category.

use super::data::EvalSet;
use super::{batches_of, Example, TrainOptions, Trainer, Walk};
use crate::error::Result;

/// What the head's figures over some sequences average: loss summed over the rows predicted,
/// agreements counted by chain step, and the walk's steps and tokens. Sums of disjoint sets add
/// up to the union's, so a set's figures come from its categories' without a pass of its own.
#[derive(Debug, Clone, Default)]
pub(super) struct FigureSums {
    loss: f32,
    rows: usize,
    agreed: Vec<f32>,
    counted: Vec<usize>,
    walked: Walk,
}

impl FigureSums {
    /// `other`'s sums added to these.
    pub(super) fn add(&mut self, other: &FigureSums) {
        self.loss += other.loss;
        self.rows += other.rows;
        self.agreed
            .resize(other.agreed.len().max(self.agreed.len()), 0.0);
        self.counted
            .resize(other.counted.len().max(self.counted.len()), 0);
        for (a, b) in self.agreed.iter_mut().zip(&other.agreed) {
            *a += b;
        }
        for (a, b) in self.counted.iter_mut().zip(&other.counted) {
            *a += b;
        }
        self.walked.steps += other.walked.steps;
        self.walked.emitted += other.walked.emitted;
    }

    /// Mean loss a predicted row, agreement by chain step, and the walk.
    pub(super) fn means(&self) -> (f32, Vec<f32>, Walk) {
        let agreement = self
            .agreed
            .iter()
            .zip(&self.counted)
            .map(|(a, &n)| if n == 0 { 0.0 } else { a / n as f32 })
            .collect();
        (self.loss / self.rows.max(1) as f32, agreement, self.walked)
    }
}

/// The head over `seqs`, not learning, in batches as training reads them: each batch's loss
/// and agreements weighted by the rows it counted, summed.
pub(super) fn figure_sums(
    trainer: &mut Trainer,
    target: &mut crate::model::decoder::Decoder,
    seqs: &[Example<'_>],
    opts: &TrainOptions,
) -> Result<FigureSums> {
    let order: Vec<usize> = (0..seqs.len()).collect();
    let mut sums = FigureSums {
        agreed: vec![0.0; opts.k],
        counted: vec![0; opts.k],
        ..FigureSums::default()
    };
    for batch in batches_of(seqs, &order, opts) {
        let examples: Vec<Example<'_>> = batch.iter().map(|&i| seqs[i]).collect();
        let r = trainer.step(target, &examples, false)?;
        sums.loss += r.loss * r.predicted as f32;
        if let Some(w) = r.walk {
            sums.walked.steps += w.steps;
            sums.walked.emitted += w.emitted;
        }
        sums.rows += r.predicted;
        for j in 0..opts.k {
            sums.agreed[j] += r.agreement[j] * r.counted[j] as f32;
            sums.counted[j] += r.counted[j];
        }
    }
    Ok(sums)
}

/// Loss and per-step agreement of the head over `seqs`, not learning ([`figure_sums`]'s means).
pub(super) fn mean_figures(
    trainer: &mut Trainer,
    target: &mut crate::model::decoder::Decoder,
    seqs: &[Example<'_>],
    opts: &TrainOptions,
) -> Result<(f32, Vec<f32>, Walk)> {
    Ok(figure_sums(trainer, target, seqs, opts)?.means())
}

/// `1 + a1 + a1 a2 + ...` for per-step agreements `a`.
pub fn simulated_tau(agreement: &[f32]) -> f32 {
    let mut run = 1.0;
    1.0 + agreement
        .iter()
        .map(|a| {
            run *= a;
            run
        })
        .sum::<f32>()
}

/// An evaluation set's sequences as examples: the whole set's, and (where it has two
/// categories or more) each category's, `{set}/{category}`, which the set is measured by.
pub(super) struct EvalExamples<'a> {
    pub(super) name: &'a str,
    pub(super) seqs: Vec<Example<'a>>,
    pub(super) categories: Vec<(String, Vec<Example<'a>>)>,
}

/// The evaluation sets' sequences as examples, by set and category.
pub(super) fn eval_examples(eval_data: &[EvalSet]) -> Vec<EvalExamples<'_>> {
    eval_data
        .iter()
        .map(|set| {
            let seqs: Vec<Example<'_>> = set
                .seqs
                .iter()
                .map(|(s, a)| Example {
                    seq: s.as_slice(),
                    answer_from: *a,
                })
                .collect();
            let mut categories: Vec<(String, Vec<Example<'_>>)> = vec![];
            for (e, c) in seqs.iter().zip(&set.categories) {
                let name = format!("{}/{}", set.name, if c.is_empty() { "other" } else { c });
                match categories.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, v)) => v.push(*e),
                    None => categories.push((name, vec![*e])),
                }
            }
            if categories.len() < 2 {
                categories.clear();
            }
            EvalExamples {
                name: &set.name,
                seqs,
                categories,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sums of `rows` predicted rows of loss `loss`, `agreed` of `counted` by chain step, and
    /// a walk of `(steps, emitted)`.
    fn sums(
        (loss, rows): (f32, usize),
        agreed: &[f32],
        counted: &[usize],
        (steps, emitted): (usize, usize),
    ) -> FigureSums {
        FigureSums {
            loss,
            rows,
            agreed: agreed.to_vec(),
            counted: counted.to_vec(),
            walked: Walk { steps, emitted },
        }
    }

    #[test]
    fn a_sets_figures_are_its_categories_summed() {
        let a = sums((2.0, 4), &[3.0, 1.0], &[4, 2], (2, 5));
        let b = sums((6.0, 2), &[1.0, 0.0], &[2, 1], (3, 4));
        let mut all = FigureSums::default();
        all.add(&a);
        all.add(&b);
        let (loss, agreement, walk) = all.means();
        assert_eq!(loss, 8.0 / 6.0);
        assert_eq!(agreement, vec![4.0 / 6.0, 1.0 / 3.0]);
        assert_eq!((walk.steps, walk.emitted), (5, 9));
        // No sequences: no loss, no agreement, and a walk of one token a pass.
        let (loss, agreement, walk) = FigureSums::default().means();
        assert_eq!((loss, agreement.len(), walk.tau()), (0.0, 0, 1.0));
    }
}

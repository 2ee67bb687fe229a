//! Where a pass's GPU time goes, stage by stage, for the developers: with `TREESPEC_PROFILE=1`
//! and passes run eagerly (`TREESPEC_CUDA_GRAPHS=0`), the step records a timing event before each
//! stage of a pass (the norms, each product, attention, the Gated DeltaNet kernels, the LM head)
//! and adds each stage's device time to the profile's totals as `gpu <layers>L <n> rows:
//! <stage>`, so that `bench --costs` says which stage grows with a verify pass's rows. Events
//! time the device, not the host; eager launches may leave the device idle between kernels,
//! which is counted in the stage that waited.

use super::*;
use std::cell::RefCell;
use std::time::Duration;

/// The events of the pass being launched, each the start of a stage.
pub(super) struct StageClock {
    marks: RefCell<Vec<(&'static str, CudaEvent)>>,
    /// The model's layers, which tell a target's passes from a drafter's in the totals.
    layers: usize,
}

impl StageClock {
    /// A clock where profiling is on, else `None`.
    pub(super) fn when_profiling(layers: usize) -> Option<StageClock> {
        crate::profile::enabled().then(|| StageClock {
            marks: RefCell::new(Vec::new()),
            layers,
        })
    }

    /// The previous stage ends and `stage` starts here on `stream`.
    pub(super) fn mark(&self, stream: &CudaStream, stage: &'static str) -> Result<()> {
        let timed = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let event = stream.record_event(timed).map_err(driver)?;
        self.marks.borrow_mut().push((stage, event));
        Ok(())
    }

    /// The pass of `n` rows ended on `stream`: each stage's time (to the next mark) into the
    /// profile's totals.
    pub(super) fn finish(&self, stream: &CudaStream, n: usize) -> Result<()> {
        self.mark(stream, "end")?;
        let marks = std::mem::take(&mut *self.marks.borrow_mut());
        for pair in marks.windows(2) {
            let ms = pair[0].1.elapsed_ms(&pair[1].1).map_err(driver)?;
            let took = Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3);
            let label = format!("gpu {}L {n:>3} rows: {}", self.layers, pair[0].0);
            crate::profile::add(&label, took);
        }
        Ok(())
    }
}

impl GpuStep {
    /// Mark the start of `stage` where the stage clock runs (profiling on, the pass eager).
    pub(super) fn mark(&self, stage: &'static str) -> Result<()> {
        match &self.clock {
            Some(c) if !self.graphs_on => c.mark(&self.stream, stage),
            _ => Ok(()),
        }
    }

    /// The pass of `n` rows ended: its stages' times into the totals, where the clock runs.
    pub(super) fn clock_pass(&self, n: usize) -> Result<()> {
        match &self.clock {
            Some(c) if !self.graphs_on => c.finish(&self.stream, n),
            _ => Ok(()),
        }
    }
}

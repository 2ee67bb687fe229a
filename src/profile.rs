//! Where a step's wall time goes, span by span, for the developers (`TREESPEC_PROFILE=1`).
//!
//! The bench's stage split says how much of a step is drafting and how much verifying; on a GPU
//! that leaves open whether a drafter call is its pass, its top-k or the host between them, since
//! the device runs asynchronously and the time lands wherever the host next waits. With the
//! variable set, each [`span`] waits for its device at both ends, so the time it records is the
//! work of that span alone, and [`report`] lists the totals. The waits serialise host and device:
//! a profiled run is slower than a plain one, and its totals are for attribution, not speed.
//! Without the variable a span costs one cached flag read.

use candle_core::Device;
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Calls and total time per label.
static TOTALS: Mutex<BTreeMap<&'static str, (u64, Duration)>> = Mutex::new(BTreeMap::new());

/// True when `TREESPEC_PROFILE=1`.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TREESPEC_PROFILE").as_deref() == Ok("1"))
}

/// A running span; records its time under its label when dropped. It holds its own handle to the
/// device (taken only when profiling is on), so a caller may go on using what it timed.
pub struct Span {
    label: &'static str,
    device: Device,
    start: Instant,
}

/// Start timing `label` on `device` (after the device's queued work), or nothing when profiling
/// is off.
pub fn span(label: &'static str, device: &Device) -> Option<Span> {
    if !enabled() {
        return None;
    }
    // A failed wait only blurs the attribution; the span still times.
    let _ = device.synchronize();
    Some(Span {
        label,
        device: device.clone(),
        start: Instant::now(),
    })
}

impl Drop for Span {
    fn drop(&mut self) {
        let _ = self.device.synchronize();
        record(self.label, self.start.elapsed());
    }
}

/// One call of `label` that took `took`, into the totals.
fn record(label: &'static str, took: Duration) {
    if let Ok(mut t) = TOTALS.lock() {
        let e = t.entry(label).or_insert((0, Duration::ZERO));
        e.0 += 1;
        e.1 += took;
    }
}

/// Add `took` to `label`'s total (one call), when profiling is on: for times measured elsewhere
/// (the GPU step's stages, timed by events). Labels are interned, so a few distinct ones may be
/// built on the fly.
pub fn add(label: &str, took: Duration) {
    if !enabled() {
        return;
    }
    static NAMES: Mutex<BTreeMap<String, &'static str>> = Mutex::new(BTreeMap::new());
    let Ok(mut names) = NAMES.lock() else {
        return;
    };
    let name: &'static str = match names.get(label) {
        Some(n) => n,
        None => {
            let n: &'static str = Box::leak(label.to_owned().into_boxed_str());
            names.insert(label.to_owned(), n);
            n
        }
    };
    record(name, took);
}

/// The totals so far, one line per label (calls, total ms, ms a call), or an empty string when
/// nothing was recorded.
pub fn report() -> String {
    let Ok(t) = TOTALS.lock() else {
        return String::new();
    };
    t.iter()
        .map(|(label, (calls, total))| {
            let ms = total.as_secs_f64() * 1e3;
            format!(
                "profile {label:<36} {calls:>8} calls {ms:>10.1} ms {:>8.3} ms a call\n",
                ms / (*calls).max(1) as f64
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_free_and_silent_when_off() {
        if enabled() {
            return; // run with TREESPEC_PROFILE=1: nothing to check
        }
        assert!(span("test", &Device::Cpu).is_none());
        assert!(!report().contains("test"));
    }
}

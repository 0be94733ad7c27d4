//! Finding the period of a loop that never reads to host.
//!
//! Without reads, nothing in the op stream marks where one training step ends. Cutting at the
//! size limit alone would start every graph at a different phase of the loop and never hit the
//! cache. The stream of a loop is periodic in structure (same ops on same shapes, only ids and
//! scalars change), so once the limit is reached we look for the smallest period `P` of the
//! recent history and cut every `P` ops from then on: every graph then has the same structure.

use burn_compile_graph::OpShape;
use std::collections::VecDeque;

/// Consecutive cache misses of period-cut graphs after which the period is forgotten (the loop
/// changed) and searched again.
const MISSES_BEFORE_RESET: u32 = 3;

/// History of one stream's op shapes and the period found in it.
#[derive(Default)]
pub struct PeriodDetector {
    history: VecDeque<u64>,
    period: Option<usize>,
    misses: u32,
}

impl PeriodDetector {
    /// Adds one op. The history keeps the last `2 × max_graph_ops` ops: enough to see two
    /// periods of any loop whose step fits in one graph.
    pub fn push(&mut self, op: OpShape, max_graph_ops: usize) {
        if self.period.is_some() {
            return;
        }
        self.history.push_back(op.0);
        while self.history.len() > 2 * max_graph_ops {
            self.history.pop_front();
        }
    }

    /// The period in force, if one was found.
    pub fn period(&self) -> Option<usize> {
        self.period
    }

    /// Looks for the smallest `P` such that the most recent `max(2P, max_graph_ops)` ops (or the
    /// whole history, if shorter) repeat with period `P`. Requiring a whole graph's worth of
    /// periodic ops rules out the period of a repeated layer inside a step; looking only at the
    /// recent ops lets the ops recorded before the loop began age out. Records and returns it.
    pub fn detect(&mut self, max_graph_ops: usize) -> Option<usize> {
        let h = self.history.make_contiguous();
        let n = h.len();
        let found = (1..=n / 2).find(|&p| {
            let window = (2 * p).max(max_graph_ops).min(n);
            (n - window + p..n).all(|i| h[i] == h[i - p])
        });
        if found.is_some() {
            self.period = found;
            self.history.clear();
            self.misses = 0;
        }
        found
    }

    /// The graph just closed came from the cache.
    pub fn hit(&mut self) {
        self.misses = 0;
    }

    /// The graph just closed had to be compiled.
    pub fn miss(&mut self) {
        if self.period.is_some() {
            self.misses += 1;
            if self.misses >= MISSES_BEFORE_RESET {
                self.period = None;
                self.misses = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(detector: &mut PeriodDetector, ops: &[u64]) {
        for &op in ops {
            detector.push(OpShape(op), 100);
        }
    }

    #[test]
    fn finds_the_step_not_a_repeated_layer() {
        // A step: prologue 9, three identical "layers" (1 2), epilogue 7 8.
        let step = [9, 1, 2, 1, 2, 1, 2, 7, 8];
        let mut d = PeriodDetector::default();
        for _ in 0..4 {
            feed(&mut d, &step);
        }
        feed(&mut d, &step[..4]); // cut mid-step: any phase works
        assert_eq!(d.detect(100), Some(step.len()));
    }

    #[test]
    fn ops_before_the_loop_age_out() {
        let step = [9, 1, 2, 1, 2, 7, 8];
        let mut d = PeriodDetector::default();
        feed(&mut d, &[40, 41, 42, 43, 44]); // setup before the loop
        for _ in 0..6 {
            feed(&mut d, &step);
        }
        // The last 21 ops (a graph's worth) are periodic; the setup is older than that.
        assert_eq!(d.detect(21), Some(step.len()));
    }

    #[test]
    fn a_repeated_layer_is_not_the_period() {
        let step = [9, 1, 2, 1, 2, 1, 2, 1, 2, 7];
        let mut d = PeriodDetector::default();
        for _ in 0..3 {
            feed(&mut d, &step);
        }
        feed(&mut d, &[9, 1, 2, 1, 2, 1, 2, 1, 2]); // the layers repeat with period 2 here
        assert_eq!(d.detect(10), Some(step.len()));
    }

    #[test]
    fn no_period_in_a_changing_stream() {
        let mut d = PeriodDetector::default();
        feed(&mut d, &(0..50).collect::<Vec<_>>());
        assert_eq!(d.detect(100), None);
    }

    #[test]
    fn forgets_the_period_after_repeated_misses() {
        let mut d = PeriodDetector::default();
        feed(&mut d, &[1, 2, 1, 2, 1, 2]);
        assert_eq!(d.detect(100), Some(2));
        d.miss();
        d.hit();
        d.miss();
        d.miss();
        assert_eq!(d.period(), Some(2));
        d.miss();
        assert_eq!(d.period(), None);
    }
}

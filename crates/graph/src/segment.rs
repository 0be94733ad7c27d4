//! A segment: the operations recorded between two breaks, with their incremental key.

use crate::{GraphKey, KeyWriter, OpShape};
use burn_ir::OperationIr;

/// Operations recorded between two breaks, in program order.
#[derive(Default)]
pub struct Segment {
    ops: Vec<OperationIr>,
    key: KeyWriter,
}

impl Segment {
    /// An empty segment.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one operation, updating the key; returns its id-free structural hash.
    pub fn push(&mut self, op: OperationIr) -> OpShape {
        let shape = self.key.push(&op);
        self.ops.push(op);
        shape
    }

    /// The recorded operations.
    pub fn ops(&self) -> &[OperationIr] {
        &self.ops
    }

    /// Number of recorded operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The cache key of the recorded operations.
    pub fn key(&self) -> GraphKey {
        self.key.key()
    }

    /// The key writer (the segment's family and sizes).
    pub fn keys(&self) -> &KeyWriter {
        &self.key
    }

    /// Takes the operations out, leaving an empty segment. Hand the emptied vector back with
    /// [`Segment::recycle`]: operations are large (hundreds of bytes), and regrowing the buffer
    /// from zero for every graph would copy each of them several times.
    pub fn take_ops(&mut self) -> Vec<OperationIr> {
        self.key.reset();
        std::mem::take(&mut self.ops)
    }

    /// Gives back a vector from [`Segment::take_ops`] (emptied) to record the next graph into.
    pub fn recycle(&mut self, mut ops: Vec<OperationIr>) {
        ops.clear();
        if self.ops.is_empty() && self.ops.capacity() < ops.capacity() {
            self.ops = ops;
        }
    }
}

//! Cache keys for captured segments.
//!
//! Burn's `OperationIr` carries global tensor ids and scalar values. Two training steps record the
//! same structure with different ids (every step allocates new tensors) and often different
//! scalars (Adam's bias correction changes every step), so neither may enter the key: ids are
//! renumbered by first appearance in the segment and scalars are hashed by kind only (their values
//! are runtime arguments of a plan). Dtypes, ranks and tensor statuses enter the key.
//!
//! Sizes are kept apart: every dimension of every tensor shape (and every slice bound) the
//! operations carry, drops excepted, goes to a list of sizes, in recording order, instead of the normalized
//! bytes. The bytes give the graph's *family* ([`KeyWriter::family`]: the same program over any
//! sizes), bytes and sizes together its exact key ([`KeyWriter::key`]: what a plan specialized
//! on every size is found by). A family's plans are guarded on the sizes (see the compiler's
//! plan cache): the list is what the guards read, and for each size the tensor and dimension it
//! belongs to ([`KeyWriter::dim_owners`]), which is how a recompile names what changed.
//!
//! The walk goes through `serde::Serialize`, which every `OperationIr` implements, so the key
//! covers every field of every operation without a hand-written match over ~330 variants.

use burn_ir::OperationIr;
use rustc_hash::FxHashMap;
use serde::{Serialize, ser};
use std::hash::Hasher;
use xxhash_rust::xxh3::xxh3_128;

/// Key of a captured segment: a 128-bit digest of its normalized operations plus their count.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct GraphKey {
    /// Digest of the normalized operation stream.
    pub digest: u128,
    /// Number of operations in the segment (a cheap second check against collisions).
    pub ops: u32,
}

impl std::fmt::Display for GraphKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}/{}", (self.digest >> 64) as u64, self.ops)
    }
}

/// Structural hash of one operation without any tensor id: what the operation does and on which
/// shapes. Equal for the same layer in two different steps; used to find a loop's period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpShape(pub u64);

/// Incremental writer of a segment key: feed operations as they are recorded, read the key at
/// the break. Recording appends the normalized bytes of the operation to a buffer (a streaming
/// hasher costs more per small write than a copy); the key hashes the buffer once. No
/// allocation once the buffer and the id table have grown.
#[derive(Default)]
pub struct KeyWriter {
    segment: Vec<u8>,
    op: rustc_hash::FxHasher,
    ids: FxHashMap<u64, u32>,
    count: u32,
    in_tensor_id: bool,
    /// Scalar operands walked so far (their values are not in the key).
    scalars: u32,
    /// The sizes walked so far, in order.
    dims: Vec<u64>,
    /// Per size: the operation, tensor and dimension it belongs to; only when asked for
    /// ([`KeyWriter::with_owners`]): recording needs the sizes, a recompile's message their
    /// owners.
    owners: Vec<DimOwner>,
    /// Whether `owners` is kept.
    track_owners: bool,
    /// Walking a `Drop`: its sizes are not keyed.
    drop: bool,
    /// Sizes in the current shape so far (their axis).
    shape_axis: usize,
    /// Walking a `Shape` (its dimensions are sizes).
    in_shape: bool,
    /// Walking a `Slice` (its start and end are sizes).
    in_slice: bool,
    /// The tensor whose fields are being walked (renumbered id).
    tensor: u32,
    /// Scalar values are written too ([`first_scalar_difference`]).
    keep_scalars: bool,
}

/// Where a size of a segment comes from: operation `op` (its position in the segment) names
/// it as dimension `axis` of tensor `tensor` (numbered by first appearance in the segment), or
/// as one of its slice bounds (`tensor` is [`DimOwner::SLICE`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DimOwner {
    pub op: u32,
    pub tensor: u32,
    pub axis: u8,
}

impl DimOwner {
    /// The `tensor` of a slice bound.
    pub const SLICE: u32 = u32::MAX;

    /// Whether the size is a slice bound rather than a tensor's dimension.
    pub fn is_slice_bound(&self) -> bool {
        self.tensor == Self::SLICE
    }
}

impl KeyWriter {
    /// Starts an empty segment key.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one operation; returns its id-free structural hash.
    pub fn push(&mut self, op: &OperationIr) -> OpShape {
        self.op = rustc_hash::FxHasher::default();
        self.count += 1;
        // A drop's sizes are no part of any plan: a tensor made in the graph has its sizes
        // keyed where it is made, and freeing one made before does not depend on them. Keyed,
        // they would make a step's graph differ with the previous step's sizes.
        self.drop = matches!(op, OperationIr::Drop(_));
        op.serialize(&mut *self)
            .expect("operation IR is always serializable");
        OpShape(self.op.finish())
    }

    /// Number of operations fed so far.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when no operation was fed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Number of scalar operands in the operations fed so far. Their values are runtime
    /// arguments, not part of the key: a pass that compares scalar values across operations
    /// would build a plan that a graph with the same key but other values must not reuse.
    pub fn scalars(&self) -> u32 {
        self.scalars
    }

    /// The exact key of everything fed so far: structure and every size (the writer can go
    /// on).
    pub fn key(&self) -> GraphKey {
        let family = xxh3_128(&self.segment);
        // SAFETY: a `u64` slice is readable as its bytes (no padding, `u8` has alignment 1).
        let sizes = unsafe {
            std::slice::from_raw_parts(self.dims.as_ptr().cast::<u8>(), self.dims.len() * 8)
        };
        let sizes = xxh3_128(sizes);
        GraphKey {
            digest: family ^ sizes.rotate_left(17).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            ops: self.count,
        }
    }

    /// The key of the family of everything fed so far: its structure, dtypes and ranks, not
    /// its sizes.
    pub fn family(&self) -> GraphKey {
        GraphKey {
            digest: xxh3_128(&self.segment),
            ops: self.count,
        }
    }

    /// The sizes fed so far, in order (every dimension of every tensor the operations name,
    /// and every slice bound).
    pub fn dims(&self) -> &[u64] {
        &self.dims
    }

    /// A writer that also keeps, per size, where it comes from ([`Self::dim_owners`]).
    pub fn with_owners() -> Self {
        Self {
            track_owners: true,
            ..Self::default()
        }
    }

    /// Per size of [`Self::dims`]: where it comes from (empty unless made by
    /// [`Self::with_owners`]).
    pub fn dim_owners(&self) -> &[DimOwner] {
        &self.owners
    }

    /// Forgets everything: the next operation starts a new segment.
    pub fn reset(&mut self) {
        self.segment.clear();
        self.ids.clear();
        self.count = 0;
        self.in_tensor_id = false;
        self.scalars = 0;
        self.dims.clear();
        self.owners.clear();
        self.in_shape = false;
        self.in_slice = false;
        self.drop = false;
    }

    fn write(&mut self, bytes: &[u8]) {
        self.segment.extend_from_slice(bytes);
        self.op.write(bytes);
    }

    fn write_u64(&mut self, value: u64) {
        if self.in_tensor_id {
            // Renumber by first appearance; the id never reaches the per-op hash.
            self.in_tensor_id = false;
            let next = self.ids.len() as u32;
            let local = *self.ids.entry(value).or_insert(next);
            self.segment.extend_from_slice(&local.to_le_bytes());
            self.tensor = local;
            return;
        }
        if self.in_shape {
            // A size: in the per-op hash (a loop's period is found over shapes), not in the
            // family's bytes.
            self.op.write(&value.to_le_bytes());
            if self.drop {
                return;
            }
            if self.track_owners {
                self.owners.push(DimOwner {
                    op: self.count - 1,
                    tensor: self.tensor,
                    axis: self.shape_axis.min(255) as u8,
                });
            }
            self.shape_axis += 1;
            self.dims.push(value);
            return;
        }
        self.write(&value.to_le_bytes());
    }

    /// A slice bound: a size when it counts from the start, structure otherwise.
    fn write_bound(&mut self, value: i64) {
        if value >= 0 {
            self.op.write(&value.to_le_bytes());
            self.dims.push(value as u64);
            if self.track_owners {
                self.owners.push(DimOwner {
                    op: self.count - 1,
                    tensor: DimOwner::SLICE,
                    axis: 0,
                });
            }
        } else {
            self.write(&value.to_le_bytes());
        }
    }
}

/// The first op at which two recordings of one graph (equal keys) differ in a scalar operand's
/// value, `None` when every scalar is equal: whether a recorded graph can be replayed with its
/// scalars as they are.
pub fn first_scalar_difference(a: &[OperationIr], b: &[OperationIr]) -> Option<usize> {
    scalar_differences(a, b).first().copied()
}

/// Every op at which two recordings of one graph (equal keys) differ in a scalar operand's
/// value, in order; an op past the shorter recording counts as differing.
pub fn scalar_differences(a: &[OperationIr], b: &[OperationIr]) -> Vec<usize> {
    let mut writers = [KeyWriter::new(), KeyWriter::new()];
    for w in &mut writers {
        w.keep_scalars = true;
    }
    let [wa, wb] = &mut writers;
    let mut differing = Vec::new();
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let (from_a, from_b) = (wa.segment.len(), wb.segment.len());
        wa.push(x);
        wb.push(y);
        if wa.segment[from_a..] != wb.segment[from_b..] {
            differing.push(i);
        }
    }
    differing.extend(a.len().min(b.len())..a.len().max(b.len()));
    differing
}

/// Error type of the key walk (never produced for `OperationIr`).
#[derive(Debug)]
pub struct WalkError(String);

impl std::fmt::Display for WalkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WalkError {}

impl ser::Error for WalkError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        WalkError(msg.to_string())
    }
}

macro_rules! write_le {
    ($($method:ident: $ty:ty),*) => {
        $(fn $method(self, v: $ty) -> Result<(), WalkError> {
            self.write(&v.to_le_bytes());
            Ok(())
        })*
    };
}

impl ser::Serializer for &mut KeyWriter {
    type Ok = ();
    type Error = WalkError;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    write_le!(serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_f32: f32,
        serialize_f64: f64, serialize_i128: i128, serialize_u128: u128);

    fn serialize_i64(self, v: i64) -> Result<(), WalkError> {
        if self.in_slice {
            self.write_bound(v);
        } else {
            self.write(&v.to_le_bytes());
        }
        Ok(())
    }
    fn serialize_bool(self, v: bool) -> Result<(), WalkError> {
        self.write(&[v as u8]);
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> Result<(), WalkError> {
        self.write_u64(v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), WalkError> {
        self.write(&(v as u32).to_le_bytes());
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), WalkError> {
        self.write(&(v.len() as u64).to_le_bytes());
        self.write(v.as_bytes());
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), WalkError> {
        self.write(&(v.len() as u64).to_le_bytes());
        self.write(v);
        Ok(())
    }
    fn serialize_none(self) -> Result<(), WalkError> {
        self.write(&[0]);
        Ok(())
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), WalkError> {
        self.write(&[1]);
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), WalkError> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        i: u32,
        _: &'static str,
    ) -> Result<(), WalkError> {
        self.write(&i.to_le_bytes());
        Ok(())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), WalkError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        name: &'static str,
        i: u32,
        _: &'static str,
        value: &T,
    ) -> Result<(), WalkError> {
        self.write(&i.to_le_bytes());
        if name == "ScalarIr" {
            // A scalar's kind is structure, its value is a runtime argument.
            self.scalars += 1;
            if !self.keep_scalars {
                return Ok(());
            }
        }
        value.serialize(self)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self, WalkError> {
        self.write(&(len.unwrap_or(usize::MAX) as u64).to_le_bytes());
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, WalkError> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, WalkError> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        i: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, WalkError> {
        self.write(&i.to_le_bytes());
        Ok(self)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self, WalkError> {
        self.write(&(len.unwrap_or(usize::MAX) as u64).to_le_bytes());
        Ok(self)
    }
    fn serialize_struct(self, name: &'static str, _: usize) -> Result<Self, WalkError> {
        self.in_tensor_id = name == "TensorId";
        match name {
            "Shape" => {
                // The axes count from each shape's start (a tensor named twice has its
                // sizes recorded twice).
                self.in_shape = true;
                self.shape_axis = 0;
            }
            "Slice" => self.in_slice = true,
            _ => {}
        }
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        i: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, WalkError> {
        self.write(&i.to_le_bytes());
        Ok(self)
    }
}

macro_rules! compound {
    ($($trait:ident :: $method:ident),*) => {
        $(impl ser::$trait for &mut KeyWriter {
            type Ok = ();
            type Error = WalkError;
            fn $method<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), WalkError> {
                value.serialize(&mut **self)
            }
            fn end(self) -> Result<(), WalkError> {
                Ok(())
            }
        })*
    };
}

compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for &mut KeyWriter {
    type Ok = ();
    type Error = WalkError;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), WalkError> {
        key.serialize(&mut **self)
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), WalkError> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), WalkError> {
        Ok(())
    }
}

impl ser::SerializeStruct for &mut KeyWriter {
    type Ok = ();
    type Error = WalkError;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), WalkError> {
        // A slice's step is structure; its start and end are sizes.
        let step = self.in_slice && name == "step";
        if step {
            self.in_slice = false;
        }
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), WalkError> {
        // Neither a shape nor a slice holds a struct: the end of one is the end of either.
        self.in_shape = false;
        self.in_slice = false;
        Ok(())
    }
}

impl ser::SerializeStructVariant for &mut KeyWriter {
    type Ok = ();
    type Error = WalkError;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        _: &'static str,
        value: &T,
    ) -> Result<(), WalkError> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), WalkError> {
        Ok(())
    }
}

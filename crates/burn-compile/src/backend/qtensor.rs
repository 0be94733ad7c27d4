//! [`QTensorOps`] of [`Compiled`]: burn-router implements none of them, and burn-ir has no
//! quantized ops, so they all run eagerly on the inner backend.
//!
//! Ops that read a float or int tensor (`quantize`, `quantize_dynamic`, `q_gather`, `q_select`)
//! first close the pending graphs (an `Unsupported` break): the input may come from one. Ops
//! whose tensor inputs are all quantized close nothing: no captured op produces a quantized
//! tensor. The ops the trait implements by default (`q_add`, `q_matmul`, …) dequantize, run the
//! float op (captured) and quantize again.

use super::{Compiled, Eager, Primitive, client, eager, eager_quantized};
use crate::capture::BreakReason;
use burn_backend::ops::QTensorOps;
use burn_backend::quantization::{QuantScheme, QuantizationParametersPrimitive};
use burn_backend::tensor::{Device, FloatTensor, IntTensor, QuantizedTensor};
use burn_backend::{
    DType, ExecutionError, FloatDType, QTensorPrimitive, Shape, Slice, TensorData, TensorMetadata,
};
use burn_ir::{BackendIr, TensorIr};
use burn_router::RunnerClient;
use burn_std::quantization::{QuantAcc, QuantPropagation};

/// A quantized tensor of `Compiled<B>`: the registered tensor, with what the inner backend's
/// tensor said of its accumulation and propagation. Its own type (not burn-router's tensor,
/// as for the other kinds) so that it reports the inner backend's quantization defaults:
/// burn-router's reports Burn's generic default scheme (values packed in `u32`), which a
/// backend storing `i8` natively (Flex, NdArray) does not use.
#[derive(Clone, Debug)]
pub struct QuantizedPrimitive<B: BackendIr> {
    tensor: Primitive<B>,
    acc: QuantAcc,
    propagation: QuantPropagation,
}

impl<B: BackendIr> QuantizedPrimitive<B> {
    pub(super) fn new(tensor: Primitive<B>, acc: QuantAcc, propagation: QuantPropagation) -> Self {
        Self {
            tensor,
            acc,
            propagation,
        }
    }

    fn into_ir(self) -> TensorIr {
        self.tensor.into_ir()
    }
}

impl<B: BackendIr> std::ops::Deref for QuantizedPrimitive<B> {
    type Target = Primitive<B>;

    fn deref(&self) -> &Primitive<B> {
        &self.tensor
    }
}

impl<B: BackendIr> TensorMetadata for QuantizedPrimitive<B> {
    fn dtype(&self) -> DType {
        self.tensor.dtype()
    }

    fn shape(&self) -> Shape {
        self.tensor.shape()
    }

    fn rank(&self) -> usize {
        self.tensor.rank()
    }
}

impl<B: BackendIr> QTensorPrimitive for QuantizedPrimitive<B> {
    fn scheme(&self) -> &QuantScheme {
        self.tensor.scheme()
    }

    fn acc_precision(&self) -> QuantAcc {
        self.acc
    }

    fn propagation(&self) -> QuantPropagation {
        self.propagation
    }

    fn default_scheme() -> QuantScheme {
        <QuantizedTensor<B> as QTensorPrimitive>::default_scheme()
    }
}

impl<B: BackendIr> QTensorOps<Self> for Compiled<B> {
    fn q_from_data(data: TensorData, device: &Device<Self>) -> QuantizedTensor<Self> {
        // An upload: a fresh tensor, no graph to close.
        let client = client::<B>(device);
        eager_quantized(&client, |inner| {
            inner.register_quantized(B::q_from_data(data, device))
        })
    }

    fn quantize(
        tensor: FloatTensor<Self>,
        scheme: &QuantScheme,
        qparams: QuantizationParametersPrimitive<Self>,
    ) -> QuantizedTensor<Self> {
        let client = tensor.client.clone();
        let (tensor, scales) = (tensor.into_ir(), qparams.scales.into_ir());
        eager(&client, BreakReason::Unsupported, "quantize", |inner| {
            let qparams = QuantizationParametersPrimitive {
                scales: inner.float(&scales),
            };
            inner.register_quantized(B::quantize(inner.float(&tensor), scheme, qparams))
        })
    }

    fn quantize_dynamic(tensor: FloatTensor<Self>, scheme: &QuantScheme) -> QuantizedTensor<Self> {
        let client = tensor.client.clone();
        let tensor = tensor.into_ir();
        eager(
            &client,
            BreakReason::Unsupported,
            "quantize_dynamic",
            |inner| inner.register_quantized(B::quantize_dynamic(inner.float(&tensor), scheme)),
        )
    }

    fn dequantize(tensor: QuantizedTensor<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        let client = tensor.client.clone();
        let tensor = tensor.into_ir();
        eager_quantized(&client, |inner| {
            inner.register_float(B::dequantize(inner.quantized(&tensor), dtype))
        })
    }

    fn q_device(tensor: &QuantizedTensor<Self>) -> Device<Self> {
        tensor.client.device()
    }

    fn q_to_device(tensor: QuantizedTensor<Self>, device: &Device<Self>) -> QuantizedTensor<Self> {
        let (source, target) = (tensor.client.clone(), client::<B>(device));
        let tensor = tensor.into_ir();
        let moved = eager_quantized(&source, |inner| {
            B::q_to_device(inner.quantized(&tensor), device)
        });
        Eager::new(&target).register_quantized(moved)
    }

    fn q_reshape(tensor: QuantizedTensor<Self>, shape: Shape) -> QuantizedTensor<Self> {
        let client = tensor.client.clone();
        let tensor = tensor.into_ir();
        eager_quantized(&client, |inner| {
            inner.register_quantized(B::q_reshape(inner.quantized(&tensor), shape))
        })
    }

    fn q_into_data(
        tensor: QuantizedTensor<Self>,
    ) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send {
        // No graph can be pending on a quantized tensor: read it from the inner backend.
        let client = tensor.client.clone();
        let tensor = tensor.into_ir();
        let tensor = eager_quantized(&client, |inner| inner.quantized(&tensor));
        B::q_into_data(tensor)
    }

    fn q_expand(tensor: QuantizedTensor<Self>, shape: Shape) -> QuantizedTensor<Self> {
        let client = tensor.client.clone();
        let tensor = tensor.into_ir();
        eager_quantized(&client, |inner| {
            inner.register_quantized(B::q_expand(inner.quantized(&tensor), shape))
        })
    }

    fn q_swap_dims(
        tensor: QuantizedTensor<Self>,
        dim1: usize,
        dim2: usize,
    ) -> QuantizedTensor<Self> {
        let client = tensor.client.clone();
        let tensor = tensor.into_ir();
        eager_quantized(&client, |inner| {
            inner.register_quantized(B::q_swap_dims(inner.quantized(&tensor), dim1, dim2))
        })
    }

    fn q_permute(tensor: QuantizedTensor<Self>, axes: &[usize]) -> QuantizedTensor<Self> {
        let client = tensor.client.clone();
        let tensor = tensor.into_ir();
        eager_quantized(&client, |inner| {
            inner.register_quantized(B::q_permute(inner.quantized(&tensor), axes))
        })
    }

    fn q_flip(tensor: QuantizedTensor<Self>, axes: &[usize]) -> QuantizedTensor<Self> {
        let client = tensor.client.clone();
        let tensor = tensor.into_ir();
        eager_quantized(&client, |inner| {
            inner.register_quantized(B::q_flip(inner.quantized(&tensor), axes))
        })
    }

    fn q_select(
        tensor: QuantizedTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> QuantizedTensor<Self> {
        let client = tensor.client.clone();
        let (tensor, indices) = (tensor.into_ir(), indices.into_ir());
        eager(&client, BreakReason::Unsupported, "q_select", |inner| {
            let out = B::q_select(inner.quantized(&tensor), dim, inner.int(&indices));
            inner.register_quantized(out)
        })
    }

    fn q_slice(tensor: QuantizedTensor<Self>, slices: &[Slice]) -> QuantizedTensor<Self> {
        let client = tensor.client.clone();
        let tensor = tensor.into_ir();
        eager_quantized(&client, |inner| {
            inner.register_quantized(B::q_slice(inner.quantized(&tensor), slices))
        })
    }

    fn q_gather(
        dim: usize,
        tensor: QuantizedTensor<Self>,
        indices: IntTensor<Self>,
    ) -> QuantizedTensor<Self> {
        let client = tensor.client.clone();
        let (tensor, indices) = (tensor.into_ir(), indices.into_ir());
        eager(&client, BreakReason::Unsupported, "q_gather", |inner| {
            let out = B::q_gather(dim, inner.quantized(&tensor), inner.int(&indices));
            inner.register_quantized(out)
        })
    }
}

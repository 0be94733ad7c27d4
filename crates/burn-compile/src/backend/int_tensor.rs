//! [`IntTensorOps`] of [`Compiled`]: every op forwards to burn-router, which records it in the
//! capture stream. Reads keep the tensor's dtype; sorts and int -> int casts run eagerly on the
//! inner backend.

use super::{Compiled, Router, eager, read};
use crate::capture::BreakReason;
use burn_backend::ops::IntTensorOps;
use burn_backend::tensor::{BoolTensor, Device, FloatTensor, IndexingUpdateOp, IntTensor};
use burn_backend::{
    BoolDType, DType, Distribution, ExecutionError, FloatDType, IntDType, Scalar, Shape, Slice,
    TensorData, TensorMetadata,
};
use burn_ir::BackendIr;

impl<B: BackendIr> IntTensorOps<Self> for Compiled<B> {
    fn int_empty(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> {
        Router::<B>::int_empty(shape, device, dtype)
    }

    fn int_into_data(
        tensor: IntTensor<Self>,
    ) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send {
        // In the tensor's own dtype, like eager Burn (burn-router converts the data).
        read(tensor)
    }

    fn int_from_data(data: TensorData, device: &Device<Self>) -> IntTensor<Self> {
        Router::<B>::int_from_data(data, device)
    }

    fn int_device(tensor: &IntTensor<Self>) -> Device<Self> {
        Router::<B>::int_device(tensor)
    }

    fn int_to_device(tensor: IntTensor<Self>, device: &Device<Self>) -> IntTensor<Self> {
        Router::<B>::int_to_device(tensor, device)
    }

    fn int_reshape(tensor: IntTensor<Self>, shape: Shape) -> IntTensor<Self> {
        Router::<B>::int_reshape(tensor, shape)
    }

    fn int_slice(tensor: IntTensor<Self>, slices: &[Slice]) -> IntTensor<Self> {
        Router::<B>::int_slice(tensor, slices)
    }

    fn int_slice_assign(
        tensor: IntTensor<Self>,
        slices: &[Slice],
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        Router::<B>::int_slice_assign(tensor, slices, value)
    }

    fn int_into_float(tensor: IntTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self> {
        Router::<B>::int_into_float(tensor, out_dtype)
    }

    fn int_mask_where(
        tensor: IntTensor<Self>,
        mask: BoolTensor<Self>,
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        Router::<B>::int_mask_where(tensor, mask, value)
    }

    fn int_mask_fill(
        tensor: IntTensor<Self>,
        mask: BoolTensor<Self>,
        value: Scalar,
    ) -> IntTensor<Self> {
        Router::<B>::int_mask_fill(tensor, mask, value)
    }

    fn int_gather(
        dim: usize,
        tensor: IntTensor<Self>,
        indices: IntTensor<Self>,
    ) -> IntTensor<Self> {
        Router::<B>::int_gather(dim, tensor, indices)
    }

    fn int_scatter_add(
        dim: usize,
        tensor: IntTensor<Self>,
        indices: IntTensor<Self>,
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        Router::<B>::int_scatter_add(dim, tensor, indices, value)
    }

    fn int_scatter_nd(
        data: IntTensor<Self>,
        indices: IntTensor<Self>,
        values: IntTensor<Self>,
        reduction: IndexingUpdateOp,
    ) -> IntTensor<Self> {
        Router::<B>::int_scatter_nd(data, indices, values, reduction)
    }

    fn int_gather_nd(data: IntTensor<Self>, indices: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::int_gather_nd(data, indices)
    }

    fn int_select(
        tensor: IntTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> IntTensor<Self> {
        Router::<B>::int_select(tensor, dim, indices)
    }

    fn int_select_add(
        tensor: IntTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        Router::<B>::int_select_add(tensor, dim, indices, value)
    }

    fn int_repeat_dim(tensor: IntTensor<Self>, dim: usize, times: usize) -> IntTensor<Self> {
        Router::<B>::int_repeat_dim(tensor, dim, times)
    }

    fn int_cat(tensors: Vec<IntTensor<Self>>, dim: usize) -> IntTensor<Self> {
        Router::<B>::int_cat(tensors, dim)
    }

    fn int_equal(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        Router::<B>::int_equal(lhs, rhs, out_dtype)
    }

    fn int_equal_elem(lhs: IntTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        Router::<B>::int_equal_elem(lhs, rhs, out_dtype)
    }

    fn int_greater(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        Router::<B>::int_greater(lhs, rhs, out_dtype)
    }

    fn int_greater_elem(
        lhs: IntTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        Router::<B>::int_greater_elem(lhs, rhs, out_dtype)
    }

    fn int_greater_equal(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        Router::<B>::int_greater_equal(lhs, rhs, out_dtype)
    }

    fn int_greater_equal_elem(
        lhs: IntTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        Router::<B>::int_greater_equal_elem(lhs, rhs, out_dtype)
    }

    fn int_lower(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        Router::<B>::int_lower(lhs, rhs, out_dtype)
    }

    fn int_lower_elem(lhs: IntTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        Router::<B>::int_lower_elem(lhs, rhs, out_dtype)
    }

    fn int_lower_equal(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        Router::<B>::int_lower_equal(lhs, rhs, out_dtype)
    }

    fn int_lower_equal_elem(
        lhs: IntTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        Router::<B>::int_lower_equal_elem(lhs, rhs, out_dtype)
    }

    fn int_add(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::int_add(lhs, rhs)
    }

    fn int_add_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        Router::<B>::int_add_scalar(lhs, rhs)
    }

    fn int_powi(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::int_powi(lhs, rhs)
    }

    fn int_powi_scalar_impl(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        Router::<B>::int_powi_scalar_impl(lhs, rhs)
    }

    fn int_clamp(tensor: IntTensor<Self>, min: Scalar, max: Scalar) -> IntTensor<Self> {
        Router::<B>::int_clamp(tensor, min, max)
    }

    fn int_sub(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::int_sub(lhs, rhs)
    }

    fn int_sub_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        Router::<B>::int_sub_scalar(lhs, rhs)
    }

    fn int_mul(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::int_mul(lhs, rhs)
    }

    fn int_mul_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        Router::<B>::int_mul_scalar(lhs, rhs)
    }

    fn int_div(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::int_div(lhs, rhs)
    }

    fn int_div_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        Router::<B>::int_div_scalar(lhs, rhs)
    }

    fn int_remainder(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::int_remainder(lhs, rhs)
    }

    fn int_remainder_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        Router::<B>::int_remainder_scalar(lhs, rhs)
    }

    fn int_matmul(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::int_matmul(lhs, rhs)
    }

    fn int_zeros(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> {
        Router::<B>::int_zeros(shape, device, dtype)
    }

    fn int_ones(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> {
        Router::<B>::int_ones(shape, device, dtype)
    }

    fn int_sum(tensor: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::int_sum(tensor)
    }

    fn int_sum_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        Router::<B>::int_sum_dim(tensor, dim)
    }

    fn int_prod(tensor: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::int_prod(tensor)
    }

    fn int_prod_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        Router::<B>::int_prod_dim(tensor, dim)
    }

    fn int_mean(tensor: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::int_mean(tensor)
    }

    fn int_mean_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        Router::<B>::int_mean_dim(tensor, dim)
    }

    fn int_cumsum(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        Router::<B>::int_cumsum(tensor, dim)
    }

    fn int_cumprod(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        Router::<B>::int_cumprod(tensor, dim)
    }

    fn int_cummin(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        Router::<B>::int_cummin(tensor, dim)
    }

    fn int_cummax(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        Router::<B>::int_cummax(tensor, dim)
    }

    fn int_argmax(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        Router::<B>::int_argmax(tensor, dim)
    }

    fn int_argtopk(tensor: IntTensor<Self>, dim: usize, k: usize) -> IntTensor<Self> {
        Router::<B>::int_argtopk(tensor, dim, k)
    }

    fn int_topk(tensor: IntTensor<Self>, dim: usize, k: usize) -> IntTensor<Self> {
        Router::<B>::int_topk(tensor, dim, k)
    }

    fn int_argmin(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        Router::<B>::int_argmin(tensor, dim)
    }

    fn int_max(tensor: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::int_max(tensor)
    }

    fn int_max_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        Router::<B>::int_max_dim(tensor, dim)
    }

    fn int_max_dim_with_indices(
        tensor: IntTensor<Self>,
        dim: usize,
    ) -> (IntTensor<Self>, IntTensor<Self>) {
        Router::<B>::int_max_dim_with_indices(tensor, dim)
    }

    fn int_max_abs(tensor: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::int_max_abs(tensor)
    }

    fn int_max_abs_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        Router::<B>::int_max_abs_dim(tensor, dim)
    }

    fn int_min(tensor: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::int_min(tensor)
    }

    fn int_min_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        Router::<B>::int_min_dim(tensor, dim)
    }

    fn int_min_dim_with_indices(
        tensor: IntTensor<Self>,
        dim: usize,
    ) -> (IntTensor<Self>, IntTensor<Self>) {
        Router::<B>::int_min_dim_with_indices(tensor, dim)
    }

    fn int_abs(tensor: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::int_abs(tensor)
    }

    fn int_swap_dims(tensor: IntTensor<Self>, dim1: usize, dim2: usize) -> IntTensor<Self> {
        Router::<B>::int_swap_dims(tensor, dim1, dim2)
    }

    fn int_permute(tensor: IntTensor<Self>, axes: &[usize]) -> IntTensor<Self> {
        Router::<B>::int_permute(tensor, axes)
    }

    fn int_flip(tensor: IntTensor<Self>, axes: &[usize]) -> IntTensor<Self> {
        Router::<B>::int_flip(tensor, axes)
    }

    fn int_random(
        shape: Shape,
        distribution: Distribution,
        device: &Device<Self>,
        dtype: IntDType,
    ) -> IntTensor<Self> {
        Router::<B>::int_random(shape, distribution, device, dtype)
    }

    fn int_expand(tensor: IntTensor<Self>, shape: Shape) -> IntTensor<Self> {
        Router::<B>::int_expand(tensor, shape)
    }

    fn int_sort(tensor: IntTensor<Self>, dim: usize, descending: bool) -> IntTensor<Self> {
        // No IR op sorts: run the inner backend's sort rather than burn-router's host round trip.
        let client = tensor.client.clone();
        let tensor = tensor.into_ir();
        eager(&client, BreakReason::Unsupported, "int_sort", |inner| {
            inner.register_int(B::int_sort(inner.int(&tensor), dim, descending))
        })
    }

    fn int_sort_with_indices(
        tensor: IntTensor<Self>,
        dim: usize,
        descending: bool,
    ) -> (IntTensor<Self>, IntTensor<Self>) {
        let client = tensor.client.clone();
        let tensor = tensor.into_ir();
        eager(
            &client,
            BreakReason::Unsupported,
            "int_sort_with_indices",
            |inner| {
                let (values, indices) =
                    B::int_sort_with_indices(inner.int(&tensor), dim, descending);
                (inner.register_int(values), inner.register_int(indices))
            },
        )
    }

    fn int_argsort(tensor: IntTensor<Self>, dim: usize, descending: bool) -> IntTensor<Self> {
        let client = tensor.client.clone();
        let tensor = tensor.into_ir();
        eager(&client, BreakReason::Unsupported, "int_argsort", |inner| {
            inner.register_int(B::int_argsort(inner.int(&tensor), dim, descending))
        })
    }

    fn bitwise_and(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::bitwise_and(lhs, rhs)
    }

    fn bitwise_and_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        Router::<B>::bitwise_and_scalar(lhs, rhs)
    }

    fn bitwise_or(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::bitwise_or(lhs, rhs)
    }

    fn bitwise_or_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        Router::<B>::bitwise_or_scalar(lhs, rhs)
    }

    fn bitwise_xor(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::bitwise_xor(lhs, rhs)
    }

    fn bitwise_xor_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        Router::<B>::bitwise_xor_scalar(lhs, rhs)
    }

    fn bitwise_not(tensor: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::bitwise_not(tensor)
    }

    fn bitwise_left_shift(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::bitwise_left_shift(lhs, rhs)
    }

    fn bitwise_left_shift_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        Router::<B>::bitwise_left_shift_scalar(lhs, rhs)
    }

    fn bitwise_right_shift(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        Router::<B>::bitwise_right_shift(lhs, rhs)
    }

    fn bitwise_right_shift_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        Router::<B>::bitwise_right_shift_scalar(lhs, rhs)
    }

    fn int_cast(tensor: IntTensor<Self>, dtype: IntDType) -> IntTensor<Self> {
        // A cast to its own dtype records nothing (no op to replay, nothing to free).
        if tensor.dtype() == DType::from(dtype) {
            return tensor;
        }
        Router::<B>::int_cast(tensor, dtype)
    }

    fn int_unfold(
        tensor: IntTensor<Self>,
        dim: usize,
        size: usize,
        step: usize,
    ) -> IntTensor<Self> {
        Router::<B>::int_unfold(tensor, dim, size, step)
    }
}

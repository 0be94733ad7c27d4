//! Launching a pointwise kernel on any CubeCL runtime.

use crate::pointwise::pointwise;
use crate::row::row;
use crate::{POINTWISE_CUBE, Reduction, cube_dim};
use burn_compile_schedule::PointwiseKernel;
use cubecl::ScalarArgType;
use cubecl::prelude::*;

/// Launches `kernel` over `len` elements: `inputs` read through their own strides, `outputs`
/// contiguous with the iteration shape (output 0 gives it; for a row kernel, each output has
/// the iteration shape or, for a row output, its row shape `[R…, 1]`), `scalars` in kernel
/// order.
///
/// # Safety
/// The arguments must match the kernel: one tensor per kernel input and output, shapes of the
/// kernel's rank (each input's dimension equal to the output's or 1 where the kernel broadcasts
/// it), `len` the number of elements of each output. The kernel is launched unchecked.
pub unsafe fn launch_pointwise<R: Runtime, E: Float + ScalarArgType>(
    client: &ComputeClient<R>,
    kernel: &PointwiseKernel,
    inputs: Vec<TensorArg<R>>,
    scalars: Vec<E>,
    outputs: Vec<TensorArg<R>>,
    len: usize,
) {
    assert_eq!(
        inputs.len(),
        kernel.inputs.len(),
        "one tensor per kernel input"
    );
    assert_eq!(
        outputs.len(),
        kernel.outputs as usize,
        "one tensor per output"
    );
    assert_eq!(
        scalars.len(),
        kernel.scalars as usize,
        "one value per scalar"
    );
    let cube_dim = cube_dim(kernel);
    let inputs: SequenceArg<R, Tensor<E>> = inputs.into_iter().collect();
    let scalars: SequenceArg<R, E> = scalars.into_iter().collect();
    let outputs: SequenceArg<R, Tensor<E>> = outputs.into_iter().collect();
    if let Some(layout) = &kernel.row {
        // `rows_per_cube` rows per cube; past 65535 cubes (wgpu's limit per dimension) the
        // grid spills into y.
        let cubes = layout.rows().div_ceil(layout.rows_per_cube as usize);
        let x = cubes.clamp(1, 65535);
        let cube_count = CubeCount::Static(x as u32, cubes.div_ceil(x) as u32, 1);
        let reduction = Reduction::for_device(client.properties(), layout);
        unsafe {
            row::launch_unchecked::<E, R>(
                client,
                cube_count,
                cube_dim,
                inputs,
                scalars,
                outputs,
                kernel.clone(),
                reduction,
            );
        }
        return;
    }
    let cubes = len.div_ceil(POINTWISE_CUBE as usize) as u32;
    let cube_count = CubeCount::Static(cubes.max(1), 1, 1);
    unsafe {
        pointwise::launch_unchecked::<E, R>(
            client,
            cube_count,
            cube_dim,
            inputs,
            scalars,
            outputs,
            kernel.clone(),
        );
    }
}

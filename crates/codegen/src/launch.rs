//! Launching a pointwise or row kernel on any CubeCL runtime.

use crate::pointwise::pointwise;
use crate::row::row;
use crate::{KernelSpec, LaunchLayout, POINTWISE_CUBE, Reduction, cube_dim};
use burn_compile_schedule::PointwiseKernel;
use cubecl::ScalarArgType;
use cubecl::prelude::*;

/// Launches `kernel` over `layout` (compiled into the kernel: its shape, each input's strides):
/// `inputs` are buffers read through those strides, `outputs` buffers contiguous in the
/// iteration shape (for a row kernel, a row output is contiguous in its row shape `[R…, 1]`),
/// `scalars` in kernel order. The buffers are plain arrays: the kernel reads no metadata, so the
/// launch uploads none.
///
/// # Safety
/// The arguments must match the kernel: one buffer per kernel input and output, each input
/// holding every element `layout` reads from it, each output the elements of its shape. The
/// kernel is launched unchecked.
pub unsafe fn launch_pointwise<R: Runtime, E: Float + ScalarArgType>(
    client: &ComputeClient<R>,
    kernel: &PointwiseKernel,
    layout: &LaunchLayout,
    inputs: Vec<ArrayArg<R>>,
    scalars: Vec<E>,
    outputs: Vec<ArrayArg<R>>,
) {
    assert_eq!(
        inputs.len(),
        kernel.inputs.len(),
        "one buffer per kernel input"
    );
    assert_eq!(
        outputs.len(),
        kernel.outputs as usize,
        "one buffer per output"
    );
    assert_eq!(
        scalars.len(),
        kernel.scalars as usize,
        "one value per scalar"
    );
    assert_eq!(
        layout.strides.len(),
        kernel.inputs.len(),
        "strides per kernel input"
    );
    let cube_dim = cube_dim(kernel);
    let spec = KernelSpec::cached(kernel, layout);
    let inputs: SequenceArg<R, Array<E>> = inputs.into_iter().collect();
    let scalars: SequenceArg<R, E> = scalars.into_iter().collect();
    let outputs: SequenceArg<R, Array<E>> = outputs.into_iter().collect();
    if let Some(rows) = &kernel.row {
        assert_eq!(rows.shape, layout.shape, "a row kernel over its own shape");
        // `rows_per_cube` rows per cube; past 65535 cubes (wgpu's limit per dimension) the
        // grid spills into y.
        let cubes = rows.rows().div_ceil(rows.rows_per_cube as usize);
        let x = cubes.clamp(1, 65535);
        let cube_count = CubeCount::Static(x as u32, cubes.div_ceil(x) as u32, 1);
        let reduction = Reduction::for_device(client.properties(), rows);
        unsafe {
            row::launch_unchecked::<E, R>(
                client, cube_count, cube_dim, inputs, scalars, outputs, spec, reduction,
            );
        }
        return;
    }
    let cubes = layout.len().div_ceil(POINTWISE_CUBE as usize) as u32;
    let cube_count = CubeCount::Static(cubes.max(1), 1, 1);
    unsafe {
        pointwise::launch_unchecked::<E, R>(
            client, cube_count, cube_dim, inputs, scalars, outputs, spec,
        );
    }
}

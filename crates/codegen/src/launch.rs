//! Launching a pointwise or row kernel on any CubeCL runtime.

use crate::pointwise::{horizontal, pointwise};
use crate::row::row;
use crate::{HorizontalSpec, KernelSpec, LaunchLayout, POINTWISE_CUBE, Reduction, cube_dim};
use burn_compile_schedule::FusedKernel;
use cubecl::ScalarArgType;
use cubecl::prelude::*;
use cubecl::server::Handle;

/// Launches `kernel` over `layout` (compiled into the kernel: its shape, each input's strides,
/// its vector width): `inputs` are buffers read through those strides, `outputs` buffers
/// contiguous in the iteration shape (for a row kernel, a row output is contiguous in its row
/// shape `[R…, 1]`), `scalars` in kernel order. The buffers are plain arrays: the kernel reads
/// no metadata, so the launch uploads none. Each buffer's length is given in elements; a
/// vectorized layout binds its wide buffers as arrays of vectors.
///
/// # Safety
/// The arguments must match the kernel: one buffer per kernel input and output, each input
/// holding every element `layout` reads from it, each output the elements of its shape. With
/// `layout.vector > 1` every buffer must start at a multiple of the vector's size in bytes
/// ([`crate::widest_aligned`] over their element offsets). The kernel is launched unchecked.
///
/// `dynamic` (empty: none) names the dimensions whose sizes the kernel takes as runtime
/// arguments ([`LaunchLayout::symbolic`]): the kernel launched is then the one of every size of
/// those dimensions, compiled once (a row kernel keeps its units per row; where its rows are
/// symbolic, a cube holds one row).
pub unsafe fn launch_pointwise<R: Runtime, E: Float + ScalarArgType>(
    client: &ComputeClient<R>,
    kernel: &FusedKernel,
    layout: &LaunchLayout,
    inputs: Vec<(Handle, usize)>,
    scalars: Vec<E>,
    outputs: Vec<(Handle, usize)>,
    dynamic: &[bool],
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
    let symbolic = dynamic.iter().any(|d| *d);
    let normalized;
    let kernel = if symbolic && kernel.row.is_some() {
        normalized = crate::symbolic_kernel(kernel, dynamic);
        &normalized
    } else {
        kernel
    };
    let cube_dim = cube_dim(kernel);
    let (spec, meta) = if symbolic {
        let (spec_layout, meta) = layout.symbolic(kernel, dynamic);
        (KernelSpec::cached(kernel, &spec_layout), meta)
    } else {
        (KernelSpec::cached(kernel, layout), Vec::new())
    };
    let vector = layout.vector;
    // Wide buffers are arrays of vectors (their length in vectors), narrow ones of elements.
    let split = |buffers: Vec<(Handle, usize)>, narrow: &dyn Fn(usize) -> bool| {
        let (mut wide, mut thin) = (Vec::new(), Vec::new());
        for (i, (handle, len)) in buffers.into_iter().enumerate() {
            // SAFETY: the caller's lengths are what the handles hold.
            if narrow(i) {
                thin.push(unsafe { ArrayArg::from_raw_parts(handle, len) });
            } else {
                wide.push(unsafe { ArrayArg::from_raw_parts(handle, len / vector) });
            }
        }
        (wide, thin)
    };
    let (wide_in, narrow_in) = split(inputs, &|i| layout.narrow_input(kernel, i));
    let (wide_out, narrow_out) = split(outputs, &|o| layout.narrow_output(kernel, o));
    // Sequences collected at each call: their vector type names the kernel's own size marker.
    let narrow_in: SequenceArg<R, Array<E>> = narrow_in.into_iter().collect();
    let scalars: SequenceArg<R, E> = scalars.into_iter().collect();
    let meta: SequenceArg<R, u32> = meta.into_iter().collect();
    if let Some(rows) = &kernel.row {
        if !symbolic {
            assert_eq!(rows.shape, layout.shape, "a row kernel over its own shape");
        }
        let narrow_out: SequenceArg<R, Array<E>> = narrow_out.into_iter().collect();
        // `rows_per_cube` rows per cube (of this launch's rows); past 65535 cubes (wgpu's limit
        // per dimension) the grid spills into y.
        let real_rows: usize = layout.shape[..layout.shape.len() - 1].iter().product();
        let cubes = real_rows.div_ceil(rows.rows_per_cube as usize);
        let x = cubes.clamp(1, 65535);
        let cube_count = CubeCount::Static(x as u32, cubes.div_ceil(x) as u32, 1);
        let reduction = Reduction::for_device(client.properties(), rows);
        // SAFETY: this function's contract (the buffers hold what the kernel reads and writes
        // over `layout`); the grid covers the launch's rows and no more cubes than that.
        unsafe {
            row::launch_unchecked::<E, R>(
                client,
                cube_count,
                cube_dim,
                vector,
                wide_in.into_iter().collect(),
                narrow_in,
                scalars,
                meta,
                wide_out.into_iter().collect(),
                narrow_out,
                spec,
                reduction,
            );
        }
        return;
    }
    // The real layout's units, also for a symbolic kernel (its own layout holds no sizes).
    let cubes = (layout.len() / vector).div_ceil(POINTWISE_CUBE as usize) as u32;
    let cube_count = CubeCount::Static(cubes.max(1), 1, 1);
    // SAFETY: this function's contract, as for the row kernel above; units past the layout's
    // end return before touching a buffer (the kernel's own bound check).
    unsafe {
        pointwise::launch_unchecked::<E, R>(
            client,
            cube_count,
            cube_dim,
            vector,
            wide_in.into_iter().collect(),
            narrow_in,
            scalars,
            meta,
            wide_out.into_iter().collect(),
            spec,
        );
    }
}

/// Launches the pointwise kernels `members` (each over its own layout, all of one vector
/// width, none symbolic) as one kernel ([`horizontal`]): `inputs`, `outputs` and `scalars` are
/// every member's, in member order, as [`launch_pointwise`] takes one kernel's.
///
/// # Safety
/// As [`launch_pointwise`], for every member and its buffers.
pub unsafe fn launch_horizontal<R: Runtime, E: Float + ScalarArgType>(
    client: &ComputeClient<R>,
    members: &[(&FusedKernel, &LaunchLayout)],
    inputs: Vec<(Handle, usize)>,
    scalars: Vec<E>,
    outputs: Vec<(Handle, usize)>,
) {
    let spec = HorizontalSpec::cached(members);
    let vector = spec.vector();
    assert!(
        members.iter().all(|(_, l)| l.vector == vector),
        "one vector width for every member"
    );
    let count =
        |f: &dyn Fn(&FusedKernel) -> usize| members.iter().map(|(k, _)| f(k)).sum::<usize>();
    assert_eq!(
        inputs.len(),
        count(&|k| k.inputs.len()),
        "one buffer per input"
    );
    assert_eq!(
        outputs.len(),
        count(&|k| k.outputs as usize),
        "one buffer per output"
    );
    assert_eq!(
        scalars.len(),
        count(&|k| k.scalars as usize),
        "one value per scalar"
    );
    let (mut wide, mut thin) = (Vec::new(), Vec::new());
    let mut buffers = inputs.into_iter();
    for (kernel, layout) in members {
        for i in 0..kernel.inputs.len() {
            let (handle, len) = buffers.next().expect("counted above");
            // SAFETY: the caller's lengths are what the handles hold.
            if layout.narrow_input(kernel, i) {
                thin.push(unsafe { ArrayArg::from_raw_parts(handle, len) });
            } else {
                wide.push(unsafe { ArrayArg::from_raw_parts(handle, len / vector) });
            }
        }
    }
    let outputs: Vec<_> = outputs
        .into_iter()
        // SAFETY: as above.
        .map(|(handle, len)| unsafe { ArrayArg::from_raw_parts(handle, len / vector) })
        .collect();
    let narrow: SequenceArg<R, Array<E>> = thin.into_iter().collect();
    let scalars: SequenceArg<R, E> = scalars.into_iter().collect();
    let meta: SequenceArg<R, u32> = SequenceArg::new();
    let cubes = spec.units().div_ceil(POINTWISE_CUBE as usize) as u32;
    let cube_count = CubeCount::Static(cubes.max(1), 1, 1);
    // SAFETY: this function's contract; units past the last member's range touch nothing.
    unsafe {
        horizontal::launch_unchecked::<E, R>(
            client,
            cube_count,
            CubeDim::new_1d(POINTWISE_CUBE),
            vector,
            wide.into_iter().collect(),
            narrow,
            scalars,
            meta,
            outputs.into_iter().collect(),
            spec,
        );
    }
}

//! Generated pointwise kernels executed on wgpu (lavapipe in CI), compared with a reference
//! evaluation of the same program in f64 on the host: broadcasting, strided (transposed)
//! inputs, runtime scalars, several outputs, every op.
//!
//! Needs a wgpu adapter: mandatory under `CI=true`, skipped loudly elsewhere.

mod support;

use burn_compile_codegen::{LaunchLayout, launch_horizontal, launch_pointwise};
use burn_compile_schedule::{FusedKernel, UnaryOp};
use cubecl::CubeElement;
use cubecl::prelude::*;
use cubecl_wgpu::{WgpuDevice, WgpuRuntime};
use std::io::Write;
use support::reference::{Input, contiguous, reference, row_reference};
use support::{BINARY_OPS, UNARY_OPS, binary, unary};

fn client() -> Option<ComputeClient<WgpuRuntime>> {
    let probe = std::panic::catch_unwind(|| WgpuRuntime::client(&WgpuDevice::default()));
    match probe {
        Ok(c) => Some(c),
        Err(_) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("the wgpu codegen tests are mandatory under CI=true, but no adapter");
            }
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED: wgpu codegen tests: no wgpu adapter. Install a Vulkan driver \
                 (apt-get install -y mesa-vulkan-drivers gives a CPU one) to run them. ***\n"
            );
            None
        }
    }
}

/// Runs `k` on wgpu and checks every output against the host reference: once in scalar code,
/// once vectorized as widely as the layout allows (up to 4 × f32, wgpu's widest), and both
/// again as the symbolic kernel of every dimension of size 2 or more (sizes, products and
/// strides read at run time; a row kernel's rows one per cube, its symbolic rows streamed). Returns the vector width the second run
/// took.
fn check(
    client: &ComputeClient<WgpuRuntime>,
    name: &str,
    k: &FusedKernel,
    shape: &[usize],
    inputs: &[Input],
    scalars: &[f32],
) -> usize {
    let strides: Vec<&[usize]> = inputs.iter().map(|i| i.strides.as_slice()).collect();
    let scalar = LaunchLayout::new(k, shape, &strides);
    let symbolic: Vec<bool> = shape.iter().map(|&s| s >= 2).collect();
    let symbolic = if symbolic.iter().any(|d| *d) {
        Some(symbolic)
    } else {
        None
    };
    run(client, name, k, &scalar, inputs, scalars, &[]);
    if let Some(dynamic) = &symbolic {
        let name = format!("{name} (symbolic)");
        run(client, &name, k, &scalar, inputs, scalars, dynamic);
    }
    let vectorized = scalar.vectorize(k, 4);
    if vectorized.vector > 1 {
        let name = format!("{name} (vectors of {})", vectorized.vector);
        run(client, &name, k, &vectorized, inputs, scalars, &[]);
        if let Some(dynamic) = &symbolic {
            let name = format!("{name}, symbolic");
            run(client, &name, k, &vectorized, inputs, scalars, dynamic);
        }
    }
    vectorized.vector
}

/// Runs `k` over `layout` on wgpu and checks every output against the host reference.
fn run(
    client: &ComputeClient<WgpuRuntime>,
    name: &str,
    k: &FusedKernel,
    layout: &LaunchLayout,
    inputs: &[Input],
    scalars: &[f32],
    dynamic: &[bool],
) {
    let shape = &layout.shape;
    let handles: Vec<_> = inputs
        .iter()
        .map(|i| client.create_from_slice(f32::as_bytes(&i.data)))
        .collect();
    // Each output's shape: the iteration shape, or a row kernel's row shape `[R…, 1]`.
    let out_shapes: Vec<Vec<usize>> = (0..k.outputs as usize)
        .map(|o| match &k.row {
            Some(layout) if layout.row_outputs[o] => {
                let mut s = shape.to_vec();
                *s.last_mut().unwrap() = 1;
                s
            }
            _ => shape.to_vec(),
        })
        .collect();
    let outputs: Vec<_> = out_shapes
        .iter()
        .map(|s| client.empty(s.iter().product::<usize>() * 4))
        .collect();
    unsafe {
        launch_pointwise::<WgpuRuntime, f32>(
            client,
            k,
            layout,
            inputs
                .iter()
                .zip(&handles)
                .map(|(i, h)| (h.clone(), i.data.len()))
                .collect(),
            scalars.to_vec(),
            outputs
                .iter()
                .zip(&out_shapes)
                .map(|(h, s)| (h.clone(), s.iter().product()))
                .collect(),
            dynamic,
        );
    }
    let want = match k.row {
        Some(_) => row_reference(k, inputs, scalars),
        None => reference(k, shape, inputs, scalars),
    };
    for (o, handle) in outputs.into_iter().enumerate() {
        let bytes = client.read_one(handle).expect("read output");
        let got = f32::from_bytes(&bytes);
        for (i, (g, w)) in got.iter().zip(&want[o]).enumerate() {
            // f32 kernels vs an f64 reference: 1e-5 absolute + 1e-4 relative.
            let tol = 1e-5 + 1e-4 * w.abs();
            assert!(
                (*g as f64 - w).abs() <= tol,
                "{name}: output {o}[{i}] = {g}, expected {w} (kernel {k:?} over {layout:?})"
            );
        }
    }
}

#[test]
fn generated_pointwise_kernels_match_the_reference_on_wgpu() {
    let Some(client) = client() else { return };

    // exp(x) * s0 + x over [5, 7] (35 elements: a partial cube; 7 columns: no vectors), and
    // over [6, 64] (vectors of 4).
    let x = contiguous(&[5, 7], 1, -2.0, 2.0);
    let v = check(&client, "chain", &support::chain(), &[5, 7], &[x], &[0.75]);
    assert_eq!(v, 1, "7 columns take no vectors");
    let x = contiguous(&[6, 64], 11, -2.0, 2.0);
    let v = check(&client, "chain", &support::chain(), &[6, 64], &[x], &[0.75]);
    assert_eq!(v, 4);

    // Folded constants, and a kernel that reads no tensor.
    let x = contiguous(&[6, 5], 21, -2.0, 2.0);
    check(
        &client,
        "constants",
        &support::constants(),
        &[6, 5],
        &[x],
        &[0.0, 0.5],
    );
    check(&client, "fill", &support::fill(), &[3, 70], &[], &[-0.25]);

    // relu(x + bias[1, n]) over [300, 9]: several cubes, a broadcast input.
    let (x, bias) = (
        contiguous(&[300, 9], 2, -1.0, 1.0),
        contiguous(&[1, 9], 3, -0.5, 0.5),
    );
    check(
        &client,
        "bias_relu",
        &support::bias_relu(),
        &[300, 9],
        &[x, bias],
        &[],
    );
    // The same over [33, 16]: the bias is read in vectors too (broadcast along rows only).
    let (x, bias) = (
        contiguous(&[33, 16], 12, -1.0, 1.0),
        contiguous(&[1, 16], 13, -0.5, 0.5),
    );
    let v = check(
        &client,
        "bias_relu",
        &support::bias_relu(),
        &[33, 16],
        &[x, bias],
        &[],
    );
    assert_eq!(v, 4);

    // `(x - m[r, 1]) * s0`: an input broadcast along the last dimension, read once per vector
    // and splatted (a narrow buffer).
    let centre = support::row_broadcast();
    let (x, m) = (
        contiguous(&[20, 32], 14, -1.0, 1.0),
        contiguous(&[20, 1], 15, -0.5, 0.5),
    );
    let v = check(&client, "centre", &centre, &[20, 32], &[x, m], &[1.5]);
    assert_eq!(v, 4);

    // A transposed input: a contiguous [4, 3] buffer (strides [3, 1]) read as its transpose,
    // shape [3, 4] with strides [1, 3].
    let mut t = contiguous(&[4, 3], 4, -1.0, 1.0);
    t.shape = vec![3, 4];
    t.strides = vec![1, 3];
    let sub = support::difference();
    let y = contiguous(&[3, 4], 5, -1.0, 1.0);
    let v = check(&client, "transposed", &sub, &[3, 4], &[t, y], &[]);
    assert_eq!(
        v, 1,
        "an input strided along the last dimension takes no vectors"
    );

    // A view copy (`view_copies`): attention's heads, a contiguous [2, 8, 4, 16] buffer read
    // as its [2, 4, 8, 16] swap (strides [512, 16, 64, 1]) and stored contiguous; the head
    // dimension keeps unit stride, so vectors of 4.
    let mut heads = contiguous(&[2, 8, 4, 16], 16, -1.0, 1.0);
    heads.shape = vec![2, 4, 8, 16];
    heads.strides = vec![512, 16, 64, 1];
    let copy = support::view_copy();
    let v = check(&client, "view copy", &copy, &[2, 4, 8, 16], &[heads], &[]);
    assert_eq!(v, 4);

    // Two outputs, activations, rank 3.
    let x = contiguous(&[2, 3, 5], 6, 0.1, 2.0);
    check(
        &client,
        "two_outputs",
        &support::two_outputs(),
        &[2, 3, 5],
        &[x],
        &[],
    );

    // Row kernels, every layout: layer norm with broadcast γ and β over 6 rows of 300
    // columns (32 units, 10 columns each, the last ones past the row; 2 rows per cube);
    // softmax over rank 3 with a row output (15 rows: 1 per cube; 40 columns, ragged);
    // 64 rows of 128 (8 rows per cube, 4 columns per unit, no ragged end); rows longer than a
    // plane's share (3000 columns: 256 units, ragged) and than the registers' (9000 columns:
    // streamed through shared slots; in vectors of 4, 40000 columns are). Vectorized, 300
    // columns are 75 vectors over 32 units (ragged).
    let layer_norm = |rows: usize, n: usize, seed: u64| -> usize {
        let (x, g, b) = (
            contiguous(&[rows, n], seed, -2.0, 2.0),
            contiguous(&[1, n], seed + 1, 0.5, 1.5),
            contiguous(&[1, n], seed + 2, -0.5, 0.5),
        );
        let ln = support::layer_norm(rows, n);
        let name = format!("layer_norm {rows}×{n}");
        check(&client, &name, &ln, &[rows, n], &[x, g, b], &[1e-5])
    };
    assert_eq!(layer_norm(6, 300, 7), 4);
    assert_eq!(layer_norm(4, 3000, 50), 4);
    assert_eq!(layer_norm(2, 9000, 60), 4);
    assert_eq!(layer_norm(1, 40000, 80), 4);
    // 40 columns are fewer than a vector per unit: scalar code. 128 are one vector of 4 per
    // unit, and the row sums (a row output) are a narrow buffer.
    for (shape, seed, width) in [([3, 5, 40], 10, 1), ([2, 32, 128], 70, 4)] {
        let x = contiguous(&shape, seed, -4.0, 4.0);
        let sm = support::softmax_rows(shape);
        let v = check(
            &client,
            &format!("softmax {shape:?}"),
            &sm,
            &shape,
            &[x],
            &[],
        );
        assert_eq!(v, width, "softmax over {shape:?}");
        let x = contiguous(&shape, seed + 1, -4.0, 4.0);
        let lsm = support::log_softmax_rows(shape);
        let name = format!("log_softmax {shape:?}");
        let v = check(&client, &name, &lsm, &shape, &[x], &[]);
        assert_eq!(v, width, "log-softmax over {shape:?}");
    }
    // A row kernel reading an input broadcast along the row (a narrow buffer):
    // `x·s[r, 1] - Σ x·s`.
    let rows = support::row_scaled_minus_sum();
    let (x, r) = (
        contiguous(&[8, 256], 90, -1.0, 1.0),
        contiguous(&[8, 1], 91, 0.5, 1.5),
    );
    let v = check(&client, "row narrow input", &rows, &[8, 256], &[x, r], &[]);
    assert_eq!(v, 4);

    // Every unary op on its domain, every binary op.
    for (i, op) in UNARY_OPS.into_iter().enumerate() {
        let (lo, hi) = match op {
            UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Recip => (0.1, 3.0),
            _ => (-3.0, 3.0),
        };
        let x = contiguous(&[64], 10 + i as u64, lo, hi);
        check(&client, &format!("{op:?}"), &unary(op), &[64], &[x], &[]);
    }
    for (i, op) in BINARY_OPS.into_iter().enumerate() {
        let (lo, hi) = support::binary_lhs_range(op);
        let (x, y) = (
            contiguous(&[64], 30 + i as u64, lo, hi),
            contiguous(&[64], 40 + i as u64, 0.5, 2.0),
        );
        check(
            &client,
            &format!("{op:?}"),
            &binary(op),
            &[64],
            &[x, y],
            &[],
        );
    }
}

/// One member of a horizontal launch: its kernel, shape, inputs and scalars.
struct Member {
    kernel: FusedKernel,
    shape: Vec<usize>,
    inputs: Vec<Input>,
    scalars: Vec<f32>,
}

/// Runs `members` as one horizontal kernel at `vector` (each member's layout from its inputs'
/// strides) and checks every member's outputs against the host reference.
fn run_horizontal(
    client: &ComputeClient<WgpuRuntime>,
    name: &str,
    members: &[Member],
    vector: usize,
) {
    let layouts: Vec<LaunchLayout> = members
        .iter()
        .map(|m| {
            let strides: Vec<&[usize]> = m.inputs.iter().map(|i| i.strides.as_slice()).collect();
            LaunchLayout::new(&m.kernel, &m.shape, &strides).vectorize(&m.kernel, vector)
        })
        .collect();
    assert!(
        layouts.iter().all(|l| l.vector == vector),
        "{name}: every member takes vectors of {vector}"
    );
    let inputs: Vec<(cubecl::server::Handle, usize)> = members
        .iter()
        .flat_map(|m| &m.inputs)
        .map(|i| {
            (
                client.create_from_slice(f32::as_bytes(&i.data)),
                i.data.len(),
            )
        })
        .collect();
    let len = |m: &Member| m.shape.iter().product::<usize>();
    let outputs: Vec<(cubecl::server::Handle, usize)> = members
        .iter()
        .flat_map(|m| (0..m.kernel.outputs).map(move |_| len(m)))
        .map(|n| (client.empty(n * 4), n))
        .collect();
    let specs: Vec<(&FusedKernel, &LaunchLayout)> =
        members.iter().map(|m| &m.kernel).zip(&layouts).collect();
    let scalars: Vec<f32> = members.iter().flat_map(|m| m.scalars.clone()).collect();
    unsafe {
        launch_horizontal::<WgpuRuntime, f32>(client, &specs, inputs, scalars, outputs.clone());
    }
    let mut outputs = outputs.into_iter();
    for (j, m) in members.iter().enumerate() {
        let want = reference(&m.kernel, &m.shape, &m.inputs, &m.scalars);
        for (o, want) in want.iter().enumerate() {
            let (handle, _) = outputs.next().expect("an output per member output");
            let bytes = client.read_one(handle).expect("read output");
            let got = f32::from_bytes(&bytes);
            assert_eq!(got.len(), want.len());
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                let tol = 1e-5 + 1e-4 * w.abs();
                assert!(
                    (*g as f64 - w).abs() <= tol,
                    "{name}: member {j} output {o}[{i}] = {g}, expected {w}"
                );
            }
        }
    }
}

/// Pointwise kernels of one launch (a horizontal group), each over its own shape, inputs,
/// strides and scalars: every member's outputs are its own kernel's. Once in scalar code with
/// a partial cube, a transposed input and members of different programs; once in vectors of 4.
#[test]
fn horizontal_kernels_compute_each_members_own_outputs_on_wgpu() {
    let Some(client) = client() else { return };
    let transposed = {
        let mut x = contiguous(&[3, 70], 31, -2.0, 2.0);
        // The same values read as [70, 3] through strides [1, 70].
        x.shape = vec![70, 3];
        x.strides = vec![1, 70];
        x
    };
    let scalar_members = vec![
        Member {
            kernel: support::chain(),
            shape: vec![5, 7],
            inputs: vec![contiguous(&[5, 7], 1, -2.0, 2.0)],
            scalars: vec![0.75],
        },
        Member {
            kernel: support::chain(),
            shape: vec![70, 3],
            inputs: vec![transposed],
            scalars: vec![-1.5],
        },
        Member {
            kernel: support::bias_relu(),
            shape: vec![300, 9],
            inputs: vec![
                contiguous(&[300, 9], 2, -1.0, 1.0),
                contiguous(&[1, 9], 3, -0.5, 0.5),
            ],
            scalars: vec![],
        },
        Member {
            kernel: support::chain(),
            shape: vec![1, 1],
            inputs: vec![contiguous(&[1, 1], 4, -2.0, 2.0)],
            scalars: vec![2.0],
        },
    ];
    run_horizontal(&client, "horizontal, scalar code", &scalar_members, 1);

    let vector_members: Vec<Member> = [(6, 64, 0.75), (2, 1024, 0.5), (33, 16, -0.25)]
        .into_iter()
        .enumerate()
        .map(|(i, (r, c, s))| Member {
            kernel: support::chain(),
            shape: vec![r, c],
            inputs: vec![contiguous(&[r, c], 40 + i as u64, -2.0, 2.0)],
            scalars: vec![s],
        })
        .collect();
    run_horizontal(&client, "horizontal, vectors of 4", &vector_members, 4);

    // An optimizer's per-parameter scalars: members of one unit each, each on its own plane
    // (12: two buffers each within the adapter's storage buffers per shader).
    let tiny: Vec<Member> = (0..12)
        .map(|i| Member {
            kernel: support::chain(),
            shape: vec![1, 1],
            inputs: vec![contiguous(&[1, 1], 60 + i as u64, -2.0, 2.0)],
            scalars: vec![0.5 + i as f32],
        })
        .collect();
    run_horizontal(&client, "horizontal, 12 members of one unit", &tiny, 1);
}

/// Column sums launched together on wgpu, each member against the same sum launched alone
/// (bit for bit: the same order of additions) and a host sum in f64: three bias gradients of
/// `[1, 700, 24]` (3 cubes each, the tile's last columns past the end), two means with an
/// outer dimension (`[3, 5, 37]`), and five of W1's `[1, 4096, 40]` (unrolled rows).
#[test]
fn column_sums_launched_together_match_each_sum_alone_on_wgpu() {
    let Some(client) = client() else { return };
    for (case, (members, [outer, reduced, inner, divisor])) in [
        (3, [1, 700, 24, 1]),
        (2, [3, 5, 37, 5]),
        (5, [1, 4096, 40, 1]),
    ]
    .into_iter()
    .enumerate()
    {
        let dims = burn_compile_codegen::ColumnDims {
            outer,
            reduced,
            inner,
            trailing: 1,
            divisor,
        };
        let inputs: Vec<_> = (0..members)
            .map(|m| {
                contiguous(
                    &[outer, reduced, inner],
                    300 + 10 * case as u64 + m as u64,
                    -2.0,
                    2.0,
                )
            })
            .collect();
        let handles: Vec<_> = inputs
            .iter()
            .map(|i| client.create_from_slice(f32::as_bytes(&i.data)))
            .collect();
        let together: Vec<_> = (0..members)
            .map(|_| client.empty(dims.columns() * 4))
            .collect();
        unsafe {
            burn_compile_codegen::launch_column_sums::<WgpuRuntime, f32>(
                &client,
                dims,
                handles.clone(),
                together.clone(),
            );
        }
        for (m, input) in inputs.iter().enumerate() {
            let alone = client.empty(dims.columns() * 4);
            unsafe {
                burn_compile_codegen::launch_column_sum::<WgpuRuntime, f32>(
                    &client,
                    dims,
                    handles[m].clone(),
                    alone.clone(),
                );
            }
            let got =
                f32::from_bytes(&client.read_one(together[m].clone()).expect("read")).to_vec();
            let want_bits = f32::from_bytes(&client.read_one(alone).expect("read")).to_vec();
            assert_eq!(got.len(), dims.columns());
            for (c, (g, a)) in got.iter().zip(&want_bits).enumerate() {
                assert_eq!(g.to_bits(), a.to_bits(), "{dims:?} member {m}, column {c}");
                let (o, k) = (c / inner, c % inner);
                let sum: f64 = (0..reduced)
                    .map(|r| input.data[(o * reduced + r) * inner + k] as f64)
                    .sum();
                let want = sum / divisor as f64;
                assert!(
                    (*g as f64 - want).abs() <= (1e-4 + 1e-5 * reduced as f64) / divisor as f64,
                    "{dims:?} member {m}, column {c}: {g} against {want}"
                );
            }
        }
    }
}

/// The column sums on wgpu against a host sum in f64: a bias gradient (`[1, 700, 24]`: 700
/// rows, not a multiple of the cube's 32 row groups; 24 columns, not of its tile of 8 … 3
/// cubes), a broadcast gradient with an outer dimension (`[3, 5, 37]`), one row (`[1, 1, 9]`),
/// more columns than 65535 cubes take (`[1, 2, 600_000]`: the grid spills into y), a mean; and
/// the strided ones, summing a trailing dimension too: with an outer dimension
/// (`[2, 3, 5, 7]`), a batch norm's mean (`[1, 64, 6, 49]` divided by 64 · 49), runs longer
/// than a cube's 256 units (`[1, 3, 2, 1000]`), and sums split into chunks (few outputs of
/// many elements: `[1, 40, 3, 1000]`, 3 chunks, a mean; `[2, 17, 5, 1031]`, 2 chunks of
/// 8,764 and 8,763, each starting inside a run). Tall sums take more row groups: W1's 4096 rows
/// (128 groups of 32 rows, unrolled) over 40 columns, 2048 rows (64 groups, unrolled) as a mean,
/// and 1500 rows over 64 groups (not a multiple: the loop) with an outer dimension.
#[test]
fn column_sums_match_a_host_sum_on_wgpu() {
    let Some(client) = client() else { return };
    let cases = [
        [1, 700, 24, 1, 1],
        [3, 5, 37, 1, 1],
        [1, 1, 9, 1, 1],
        [1, 2, 600_000, 1, 1],
        [1, 700, 24, 1, 700],
        [2, 3, 5, 7, 1],
        [1, 64, 6, 49, 64 * 49],
        [1, 3, 2, 1000, 1],
        [1, 40, 3, 1000, 40 * 1000],
        [2, 17, 5, 1031, 1],
        [1, 4096, 40, 1, 1],
        [1, 2048, 8, 1, 2048],
        [2, 1500, 9, 1, 1],
    ];
    for (i, [outer, reduced, inner, trailing, divisor]) in cases.into_iter().enumerate() {
        let dims = burn_compile_codegen::ColumnDims {
            outer,
            reduced,
            inner,
            trailing,
            divisor,
        };
        let input = contiguous(&[outer, reduced, inner, trailing], 90 + i as u64, -2.0, 2.0);
        let output = client.empty(dims.columns() * 4);
        unsafe {
            burn_compile_codegen::launch_column_sum::<WgpuRuntime, f32>(
                &client,
                dims,
                client.create_from_slice(f32::as_bytes(&input.data)),
                output.clone(),
            );
        }
        let bytes = client.read_one(output).expect("read output");
        let got = f32::from_bytes(&bytes);
        assert_eq!(got.len(), outer * inner);
        for o in 0..outer {
            for c in 0..inner {
                let sum: f64 = (0..reduced)
                    .flat_map(|r| (0..trailing).map(move |t| (r, t)))
                    .map(|(r, t)| input.data[((o * reduced + r) * inner + c) * trailing + t] as f64)
                    .sum();
                let want = sum / divisor as f64;
                let g = got[o * inner + c] as f64;
                // f32 accumulation of up to 40,000 values in [-2, 2].
                let summed = (reduced * trailing) as f64;
                assert!(
                    (g - want).abs() <= (1e-4 + 1e-5 * summed) / divisor as f64,
                    "{dims:?}: column ({o}, {c}): {g} against {want}"
                );
            }
        }
    }
}

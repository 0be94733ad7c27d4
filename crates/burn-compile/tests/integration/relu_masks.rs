//! ReLU masks (`relu_masks`): in a captured training step each ReLU backward reads the forward's
//! output instead of the pre-activation autodiff kept, and the gradients stay eager's — on the
//! step's first run (compiled) and on its replays (a cached plan rewriting each new graph's
//! reads), with the option off as well.
//!
//! A module of its own: it configures the one Flex device.

use burn::backend::Autodiff;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData, Tolerance};
use burn_compile::{CompileConfig, Compiled, configure, explain};
use burn_flex::{Flex, FlexDevice};

use crate::support::{float_data, load, weights};

#[derive(Module, Debug)]
struct Mlp<B: burn::tensor::backend::Backend> {
    l1: Linear<B>,
    l2: Linear<B>,
    l3: Linear<B>,
    relu: Relu,
}

impl<B: burn::tensor::backend::Backend> Mlp<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            l1: LinearConfig::new(16, 32).init(device),
            l2: LinearConfig::new(32, 32).init(device),
            l3: LinearConfig::new(32, 8).init(device),
            relu: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let h = self.relu.forward(self.l1.forward(x));
        let h = self.relu.forward(self.l2.forward(h));
        self.l3.forward(h)
    }
}

/// One step's loss and gradients (every parameter's, then the input's), from `init` weights.
fn step<B: AutodiffBackend>(init: &[TensorData], seed: u64) -> Vec<TensorData> {
    let device = Default::default();
    let model = load(Mlp::<B>::new(&device), init.to_vec());
    let x =
        Tensor::<B, 2>::from_data(float_data(&[64, 16], seed, -1.0, 1.0), &device).require_grad();
    let target = Tensor::<B, 2>::from_data(float_data(&[64, 8], seed + 1, -1.0, 1.0), &device);
    let diff = model.forward(x.clone()) - target;
    let loss = (diff.clone() * diff).mean();
    let grads = loss.backward();
    let mut out = vec![loss.into_data()];
    out.extend([&model.l1, &model.l2, &model.l3].iter().flat_map(|l| {
        [
            l.weight.grad(&grads).unwrap().into_data(),
            l.bias.as_ref().unwrap().grad(&grads).unwrap().into_data(),
        ]
    }));
    out.push(x.grad(&grads).unwrap().into_data());
    out
}

/// For each ReLU backward of a graph listing: whether its first input is the output of a ReLU
/// (`Some(true)`), the input of one (`Some(false)`), or neither (`None`).
fn backward_reads(listing: &str) -> Vec<Option<bool>> {
    // `   12  %7: F32[64, 32] = Custom.burn_compile.relu(%6!)`
    let parse = |line: &str| -> Option<(String, Vec<String>)> {
        let (out, rest) = line.split_once(": ")?;
        let out = out.split_whitespace().last()?.to_string();
        let args = rest.split_once('(')?.1.trim_end().trim_end_matches(')');
        let args = args
            .split(", ")
            .map(|a| a.trim_end_matches('!').to_string())
            .collect();
        Some((out, args))
    };
    let (mut outputs, mut inputs) = (Vec::new(), Vec::new());
    let mut reads = Vec::new();
    for line in listing.lines() {
        if line.contains("burn_compile.relu(") {
            let (out, args) = parse(line).expect("a ReLU line parses");
            outputs.push(out);
            inputs.push(args[0].clone());
        } else if line.contains("burn_compile.relu_backward(") {
            let (_, args) = parse(line).expect("a ReLU backward line parses");
            reads.push(if outputs.contains(&args[0]) {
                Some(true)
            } else if inputs.contains(&args[0]) {
                Some(false)
            } else {
                None
            });
        }
    }
    reads
}

#[test]
fn relu_backwards_read_the_forward_outputs_and_the_gradients_stay_eagers() {
    crate::own_process!(relu_backwards_read_the_forward_outputs_and_the_gradients_stay_eagers);
    type C = Autodiff<Compiled<Flex>>;
    type E = Autodiff<Flex>;
    let init = weights(&Mlp::<E>::new(&Default::default()));
    // Relative 1e-5: the C kernels and Flex sum in different orders; absolute 1e-6 for entries
    // that cancel to about zero.
    let tol = Tolerance::<f32>::rel_abs(1e-5, 1e-6);
    for masks in [true, false] {
        configure(
            &FlexDevice,
            CompileConfig {
                relu_masks: masks,
                ..Default::default()
            },
        );
        // Three steps on fresh data: the first compiles, the others replay the cached plan.
        for seed in [3, 11, 19] {
            let want = step::<E>(&init, seed);
            let (got, report) = explain(|| step::<C>(&init, seed));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                eprintln!("masks {masks}, seed {seed}: output {i} {:?}", w.shape);
                g.assert_approx_eq::<f32>(w, tol);
            }
            let reads: Vec<Option<bool>> = report
                .graphs
                .iter()
                .filter_map(|g| g.listing.as_deref())
                .flat_map(backward_reads)
                .collect();
            assert_eq!(
                reads,
                vec![Some(masks); 2],
                "masks {masks}, seed {seed}: each of the two ReLU backwards reads the ReLU's \
                 {}:\n{report}",
                if masks { "output" } else { "input" }
            );
            if seed != 3 {
                let mut with_backwards = report.graphs.iter().filter(|g| {
                    g.listing
                        .as_deref()
                        .is_some_and(|l| l.contains("relu_backward("))
                });
                assert!(
                    with_backwards.clone().count() > 0 && with_backwards.all(|g| g.cache_hit),
                    "the step's replays run its cached plan:\n{report}"
                );
            }
        }
    }
}

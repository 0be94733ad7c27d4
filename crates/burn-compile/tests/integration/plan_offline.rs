//! `burn-compile-plan`: a graph captured on the CPU (an attention layer's forward and backward,
//! dumped by `dump_graphs`) planned as CUDA and wgpu would plan it, with no GPU: CUDA's plan
//! has library matmuls and copies the heads' swapped views once (`view_copies`), q's, k's and
//! v's together; `--dtype bf16` plans it in bf16; without `view_copies` no copy; bad arguments
//! exit with status 2. (A process of its own: it configures the one Flex device.)

use burn::backend::Autodiff;
use burn::nn::attention::{MhaInput, MultiHeadAttentionConfig};
use burn::tensor::Tensor;
use burn_compile::incident::GraphFile;
use burn_compile::{CompileConfig, Compiled, configure};
use burn_flex::{Flex, FlexDevice};
use std::path::PathBuf;
use std::process::Command;

use crate::support;

fn plan(file: &PathBuf, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_burn-compile-plan"))
        .arg(file)
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[test]
fn an_attention_layer_captured_on_the_cpu_is_planned_for_cuda_and_wgpu() {
    crate::own_process!(an_attention_layer_captured_on_the_cpu_is_planned_for_cuda_and_wgpu);
    let root = std::env::temp_dir().join(format!("bc-plan-offline-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let dumps = root.join("dumps");
    configure(
        &FlexDevice,
        CompileConfig {
            cache_dir: Some(root.join("cache")),
            dump_graphs: true,
            incident_dir: Some(dumps.clone()),
            ..Default::default()
        },
    );
    type T = Autodiff<Compiled<Flex>>;
    let device = FlexDevice;
    let mha = MultiHeadAttentionConfig::new(32, 4)
        .with_dropout(0.0)
        .init::<T>(&device);
    let x = Tensor::<T, 3>::from_data(support::float_data(&[2, 8, 32], 5, -1.0, 1.0), &device)
        .require_grad();
    let y = mha.forward(MhaInput::self_attn(x.clone())).context;
    let grads = (y.clone() * y).sum().backward();
    x.grad(&grads).expect("x has a gradient").into_data();

    // The step's graph: the dumped file with the most operations.
    let mut files: Vec<(usize, PathBuf)> = std::fs::read_dir(&dumps)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| (GraphFile::read(&p).unwrap().ops.len(), p))
        .collect();
    files.sort();
    let (_, file) = files.pop().expect("graphs were dumped");

    let (status, cuda) = plan(&file, &["--dtype", "bf16"]);
    assert_eq!(status, Some(0), "{cuda}");
    assert!(cuda.contains("library matmul:"), "{cuda}");
    assert!(cuda.contains("BF16") && !cuda.contains("F32"), "{cuda}");
    // Forward: q, k, v (one launch) and the context merged back; backward: the context's
    // gradient split into heads, and q's, k's and v's gradients merged back.
    let copies = cuda.matches("copy of a swapped view").count();
    assert!(copies >= 8, "{cuda}");
    assert!(
        cuda.contains("horizontal kernel of 3 pointwise kernels"),
        "{cuda}"
    );
    assert!(cuda.contains("executable:"), "{cuda}");
    // Every product and reshape then reads a layout it takes in place.
    assert!(
        cuda.contains("0 library matmul(s) copy an operand first, 0 reshape(s) copy"),
        "{cuda}"
    );

    let (status, wgpu) = plan(&file, &["--target", "wgpu", "--max-buffers", "15"]);
    assert_eq!(status, Some(0), "{wgpu}");
    assert!(!wgpu.contains("library matmul:"), "{wgpu}");
    assert!(wgpu.contains("copy of a swapped view"), "{wgpu}");

    let mut without = GraphFile::read(&file).unwrap();
    without.config.view_copies = false;
    let written = without.write(&root).unwrap();
    let (status, plain) = plan(&written, &[]);
    assert_eq!(status, Some(0), "{plain}");
    assert!(!plain.contains("copy of a swapped view"), "{plain}");
    // Without them, the products and the heads' merging reshapes copy: q and kᵀ, v, the
    // output gradient's heads, k, q (six calls), the context and three gradients (four).
    assert!(
        plain.contains("6 library matmul(s) copy an operand first, 4 reshape(s) copy"),
        "{plain}"
    );

    for bad in [
        &["--target", "tpu"][..],
        &["--dtype", "f8"],
        &["--max-buffers", "many"],
    ] {
        let (status, text) = plan(&file, bad);
        assert_eq!(status, Some(2), "{bad:?}: {text}");
    }
    let (status, text) = plan(&root.join("missing.json"), &[]);
    assert_eq!(status, Some(2), "{text}");
    let _ = std::fs::remove_dir_all(&root);
}

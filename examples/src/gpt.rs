//! A GPT: token and learned position embeddings, pre-norm causal transformer blocks (Burn's
//! `TransformerEncoder` with `norm_first` and an autoregressive mask; GELU, no dropout), a final
//! layer norm and a head, untied or tied to the token embedding as GPT-2's. `train_gpt` trains a
//! small one on bytes; `w2_bench` times GPT-2 small (W2).

use burn::module::{Module, Param};
use burn::nn::attention::generate_autoregressive_mask;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

#[derive(Clone, Copy, Debug)]
pub struct GptConfig {
    pub vocab: usize,
    pub context: usize,
    pub d_model: usize,
    pub heads: usize,
    pub layers: usize,
    /// The head is the token embedding's transpose (GPT-2), not a layer of its own.
    pub tied: bool,
}

impl GptConfig {
    /// GPT-2 small (`transformers`' `GPT2Config()`): 50,257 tokens, context 1024, 12 layers of
    /// d 768 with 12 heads, tied head.
    pub const GPT2_SMALL: GptConfig = GptConfig {
        vocab: 50257,
        context: 1024,
        d_model: 768,
        heads: 12,
        layers: 12,
        tied: true,
    };
}

#[derive(Module, Debug)]
pub struct Gpt<B: Backend> {
    tokens: Embedding<B>,
    positions: Embedding<B>,
    blocks: TransformerEncoder<B>,
    norm: LayerNorm<B>,
    head: Option<Linear<B>>,
}

impl<B: Backend> Gpt<B> {
    pub fn new(c: &GptConfig, device: &B::Device) -> Self {
        Self {
            tokens: EmbeddingConfig::new(c.vocab, c.d_model).init(device),
            positions: EmbeddingConfig::new(c.context, c.d_model).init(device),
            blocks: TransformerEncoderConfig::new(c.d_model, 4 * c.d_model, c.heads, c.layers)
                .with_norm_first(true)
                .with_dropout(0.0)
                .init(device),
            norm: LayerNormConfig::new(c.d_model).init(device),
            head: (!c.tied).then(|| LinearConfig::new(c.d_model, c.vocab).init(device)),
        }
    }

    /// Next-token logits `[batch, seq, vocab]` of `tokens` `[batch, seq]`.
    pub fn forward(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let [batch, seq] = tokens.dims();
        let device = tokens.device();
        let positions = Tensor::<B, 1, Int>::arange(0..seq as i64, &device)
            .unsqueeze::<2>()
            .expand([batch, seq]);
        let x = self.tokens.forward(tokens) + self.positions.forward(positions);
        let mask = generate_autoregressive_mask::<B>(batch, seq, &device);
        let x = self
            .blocks
            .forward(TransformerEncoderInput::new(x).mask_attn(mask));
        let x = self.norm.forward(x);
        match &self.head {
            Some(head) => head.forward(x),
            None => {
                let weight: Param<Tensor<B, 2>> = self.tokens.weight.clone();
                x.matmul(weight.val().transpose().unsqueeze::<3>())
            }
        }
    }

    /// Mean cross-entropy of `targets` (the next tokens) under the logits of `inputs`.
    pub fn loss(&self, inputs: Tensor<B, 2, Int>, targets: Tensor<B, 2, Int>) -> Tensor<B, 1> {
        let logits = self.forward(inputs);
        let [b, s, v] = logits.dims();
        CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.reshape([b * s, v]), targets.reshape([b * s]))
    }
}

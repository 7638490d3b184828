"""Random-weight GGUF files of every family at SmolLM2-135M's size, for the
speed bench (`scripts/bench-families.sh`): each built by transformers with
the family's layout (hidden 576, 30 layers, 9 query and 3 key/value heads
of 64, an MLP of 1536, a vocabulary of 49,152; Qwen3-MoE: 8 experts of
768, 2 per token), converted by llama.cpp's converter and quantized to Q8_0
by llama-quantize. The weights are random: the files measure speed, not
quality.

    python bench_models.py LLAMA_CPP_DIR OUT_DIR [--only a,b]

Writes OUT_DIR/<family>.q8_0.gguf (skipping files already there).
"""

import argparse
import pathlib
import sys
import tempfile

import transformers

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import compare_llama_cpp as cl  # noqa: E402
import compare_transformers as ct  # noqa: E402

SHAPE = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
             num_key_value_heads=3, head_dim=64, rms_norm_eps=1e-5, initializer_range=0.02,
             max_position_embeddings=8192, vocab_size=49152, tie_word_embeddings=True)


def families():
    gemma = dict(SHAPE, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=64,
                 sliding_window=512)
    return {
        "llama": (transformers.LlamaConfig, dict(SHAPE, **ct.rope(100000.0, None)), "bpe"),
        "qwen3": (transformers.Qwen3Config, dict(SHAPE, **ct.rope(1000000.0, None)), "bpe"),
        "gemma2": (transformers.Gemma2Config, dict(gemma, attn_logit_softcapping=50.0,
                                                   final_logit_softcapping=30.0,
                                                   **ct.rope(10000.0, None)), "spm"),
        "gemma3": (transformers.Gemma3TextConfig, dict(gemma, sliding_window_pattern=6,
                                                       final_logit_softcapping=None,
                                                       attn_logit_softcapping=None,
                                                       **ct.gemma3_rope(10000.0, 1000000.0, 8.0)), "spm"),
        # llama.cpp requires an OLMo 2 output matrix of its own.
        "olmo2": (transformers.Olmo2Config, dict(SHAPE, tie_word_embeddings=False,
                                                 **ct.rope(500000.0, None)), "bpe"),
        "phi3": (transformers.Phi3Config, dict(SHAPE, pad_token_id=0, sliding_window=None,
                                               original_max_position_embeddings=8192,
                                               **ct.rope(10000.0, None)), "spm"),
        "qwen3moe": (transformers.Qwen3MoeConfig, dict(SHAPE, num_experts=8, num_experts_per_tok=2,
                                                       moe_intermediate_size=768, norm_topk_prob=True,
                                                       **ct.rope(1000000.0, None)), "bpe"),
    }


def main():
    args = argparse.ArgumentParser()
    args.add_argument("llama_cpp")
    args.add_argument("out")
    args.add_argument("--only", default="")
    args = args.parse_args()
    llama, out = pathlib.Path(args.llama_cpp), pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    transformers.logging.set_verbosity_error()
    only = [c for c in args.only.split(",") if c]
    for name, (cls, kwargs, kind) in families().items():
        target = out / f"{name}.q8_0.gguf"
        if (only and name not in only) or target.exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            folder = tmp / name.replace("phi3", "fused")
            # The converter pads a smaller tokenizer's vocabulary to the
            # model's 49,152 entries.
            cl.build(name, cls, kwargs, kind, folder)
            f32 = tmp / "f32.gguf"
            cl.convert(llama, folder, f32)
            partial = target.with_suffix(".partial")
            cl.quantize(llama, f32, partial, "Q8_0")
            partial.rename(target)
        print(f"{name}: {target} ({target.stat().st_size / 1e6:.0f} MB)", flush=True)


if __name__ == "__main__":
    main()

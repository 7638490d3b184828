"""Random-weight GGUF files of every family at SmolLM2-135M's size, for the
speed bench (`scripts/bench-families.sh`): each built by transformers with
the family's layout (hidden 576, 30 layers, 9 query and 3 key/value heads
of 64, an MLP of 1536, a vocabulary of 49,152; Qwen3-MoE: 8 experts of
768, 2 per token), converted by llama.cpp's converter and quantized to Q8_0
by llama-quantize. The weights are random: the files measure speed, not
quality.

    python bench_models.py LLAMA_CPP_DIR OUT_DIR [--only a,b]

Writes OUT_DIR/<family>.q8_0.gguf (skipping files already there).

    python bench_models.py LLAMA_CPP_DIR OUT_DIR --presets [Q4_K_M,IQ4_XS]

Writes instead one random llama model of Llama 3.2 1B's layout (hidden
2048, 16 layers, 32 query and 8 key/value heads of 64, an MLP of 8192; a
vocabulary of 49,152), whose widths are all multiples of 256 so that
llama-quantize applies the K-quants and IQ4 types rather than falling back,
quantized into each of llama.cpp's presets: OUT_DIR/llama1b.<preset>.gguf.
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


# llama-quantize presets, one per tensor type vauban runs as stored (the
# mixes the presets write: Q4_K_M holds Q4_K, Q6_K; Q3_K_M holds Q3_K, Q4_K,
# Q5_K, Q6_K; Q2_K also Q4_K; IQ4_XS and IQ4_NL also Q6_K or Q5_K).
PRESETS = ["Q2_K", "Q3_K_M", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q4_K_M", "Q5_K_M",
           "Q6_K", "Q8_0", "IQ4_XS", "F16", "BF16"]

LAYOUT_1B = dict(SHAPE, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                 num_attention_heads=32, num_key_value_heads=8, **ct.rope(500000.0, None))


def presets(llama, out, only):
    """The 1B-layout model in each preset (skipping files already there)."""
    chosen = [p for p in PRESETS if not only or p in only]
    targets = {p: out / f"llama1b.{p}.gguf" for p in chosen}
    if all(t.exists() for t in targets.values()):
        return
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        tmp = pathlib.Path(tmp)
        folder = tmp / "llama"
        cl.build("llama", transformers.LlamaConfig, LAYOUT_1B, "bpe", folder)
        f32 = tmp / "f32.gguf"
        cl.convert(llama, folder, f32)
        for preset, target in targets.items():
            if target.exists():
                continue
            partial = target.with_suffix(".partial")
            cl.quantize(llama, f32, partial, preset)
            partial.rename(target)
            print(f"{preset}: {target} ({target.stat().st_size / 1e6:.0f} MB)", flush=True)


def main():
    args = argparse.ArgumentParser()
    args.add_argument("llama_cpp")
    args.add_argument("out")
    args.add_argument("--only", default="")
    args.add_argument("--presets", nargs="?", const="", default=None)
    args = args.parse_args()
    llama, out = pathlib.Path(args.llama_cpp), pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    transformers.logging.set_verbosity_error()
    only = [c for c in args.only.split(",") if c]
    if args.presets is not None:
        presets(llama, out, [p for p in args.presets.split(",") if p])
        return
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

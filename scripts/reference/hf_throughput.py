"""transformers' side of the throughput benchmark (issue 39), written
independently of vauban: a random-weight Llama model of a real layout, and
`generate` timed on the same prompts the Torch executor runs.

    python hf_throughput.py make DIR [--layout llama3-8b|smollm2] [--device cpu|cuda]

Writes DIR: config.json, bf16 safetensors of random weights (seed 0) and a
tokenizer.json with one word-level token per id (the benchmark feeds token
ids; vauban's HF reader needs a tokenizer to open the folder). Its
end-of-sequence id is the vocabulary's last, so greedy generations of
random weights rarely stop early.

    python hf_throughput.py time DIR --ids IDS.json [--batches 1,8,32]
        [--new-tokens 128] [--device cpu|cuda] [--dtype bf16|f16|f32]

Prints one JSON line per batch size: prefill tokens/s (one forward pass of
the prompts into an empty cache, logits at the last position, as
`generate`'s first step) and decode tokens/s (`generate` with
`min_new_tokens` = `max_new_tokens`, greedy, its time less the prefill's,
over its new tokens after the first), `torch.cuda.synchronize()` around
each timing on a GPU. The median of `--reps` (default 3) after a warm-up.
"""

import argparse
import json
import pathlib
import statistics
import time

import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers

LAYOUTS = {
    # Meta-Llama-3-8B's config.json, weights random.
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                      vocab_size=128256, rope_theta=500000.0, max_position_embeddings=8192,
                      rms_norm_eps=1e-5, tie_word_embeddings=False),
    # SmolLM2-135M's shape: the layout this machine's CPU can time.
    "smollm2": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                    vocab_size=49152, rope_theta=100000.0, max_position_embeddings=8192,
                    rms_norm_eps=1e-5, tie_word_embeddings=True),
}

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def make(out: pathlib.Path, layout: str, device: str) -> None:
    shape = LAYOUTS[layout]
    vocab = shape["vocab_size"]
    config = transformers.LlamaConfig(**shape, bos_token_id=0, eos_token_id=vocab - 1,
                                      pad_token_id=0, initializer_range=0.02)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokens = {f"t{i}": i for i in range(vocab)}
    tokenizer = Tokenizer(models.WordLevel(tokens, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "t0", "eos_token": f"t{vocab - 1}", "add_bos_token": False}))
    print(f"wrote {out}: {layout}, {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters")


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str, f) -> float:
    sync(device)
    start = time.perf_counter()
    f()
    sync(device)
    return time.perf_counter() - start


def time_generate(folder: pathlib.Path, ids_file: pathlib.Path, batches, new_tokens: int,
                  device: str, dtype: str, reps: int) -> None:
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=DTYPES[dtype], attn_implementation="sdpa").to(device).eval()
    prompts = json.loads(ids_file.read_text())
    for b in batches:
        ids = torch.tensor(prompts[:b], device=device)
        mask = torch.ones_like(ids)

        def prefill():
            with torch.no_grad():
                model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)

        def generate():
            with torch.no_grad():
                model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                               min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)

        prefill()
        generate()
        prefill_s = statistics.median(timed(device, prefill) for _ in range(reps))
        total_s = statistics.median(timed(device, generate) for _ in range(reps))
        decode_s = total_s - prefill_s
        print(json.dumps({
            "engine": f"transformers {transformers.__version__} (torch {torch.__version__}, sdpa)",
            "device": device, "dtype": dtype, "batch": b,
            "prompt_tokens": int(ids.numel()), "generated_tokens": b * new_tokens,
            "prefill_tokens_per_s": ids.numel() / prefill_s,
            "decode_tokens_per_s": b * (new_tokens - 1) / decode_s,
            "wall_s": total_s,
        }), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir", type=pathlib.Path)
    m.add_argument("--layout", choices=sorted(LAYOUTS), default="llama3-8b")
    m.add_argument("--device", default="cpu")
    t = sub.add_parser("time")
    t.add_argument("dir", type=pathlib.Path)
    t.add_argument("--ids", type=pathlib.Path, required=True)
    t.add_argument("--batches", default="1,8,32")
    t.add_argument("--new-tokens", type=int, default=128)
    t.add_argument("--device", default="cpu")
    t.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    t.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    torch.set_grad_enabled(False)
    if a.command == "make":
        make(a.dir, a.layout, a.device)
    else:
        batches = [int(b) for b in a.batches.split(",")]
        time_generate(a.dir, a.ids, batches, a.new_tokens, a.device, a.dtype, a.reps)


if __name__ == "__main__":
    main()

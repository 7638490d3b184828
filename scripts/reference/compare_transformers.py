"""Cross-check vauban's candle forward against Hugging Face transformers.

Builds tiny random llama-family models with transformers (llama, llama with
llama3 RoPE scaling and tied embeddings, qwen2 with Q/K/V biases, mistral),
saves each as an HF folder, runs the same prompt through transformers and
through the `vauban` binary, and compares logits, residual-stream
activations and greedy continuations. Needs torch, transformers, tokenizers,
safetensors and numpy; no network.

    python3 scripts/reference/compare_transformers.py target/release/vauban OUT_DIR

Prints one line per model and writes OUT_DIR/compare_transformers.json.
Exit 1 when a model differs beyond the tolerances stated below.
"""

import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors.numpy import load_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

LOGIT_TOL = 2e-4  # max |Δlogit|, f32 on both sides
ACT_TOL = 2e-4  # max |Δ| of residual activations
TEXT = "the cat in the hat sat on a mat, then ran in"
SPECIAL = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]
MERGES = [("h", "e"), ("Ġ", "t"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a")]


def tokenizer():
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {t: i for i, t in enumerate(SPECIAL + alphabet + [a + b for a, b in MERGES])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=MERGES))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True) for s in SPECIAL])
    return tok, len(vocab)


def rope(theta, scaling):
    """RoPE settings in the form this transformers version takes."""
    major = int(transformers.__version__.split(".")[0])
    if major >= 5:
        params = {"rope_type": "default", "rope_theta": theta}
        if scaling:
            params.update(scaling)
        return {"rope_parameters": params}
    out = {"rope_theta": theta}
    if scaling:
        out["rope_scaling"] = scaling
    return out


def cases(vocab):
    base = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
                initializer_range=0.3, bos_token_id=0, eos_token_id=3)
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    return {
        "llama": (transformers.LlamaConfig, dict(base, tie_word_embeddings=False, **rope(10000.0, None))),
        "llama3_rope_tied": (transformers.LlamaConfig, dict(base, tie_word_embeddings=True, **rope(500000.0, llama3))),
        "qwen2_bias": (transformers.Qwen2Config, dict(base, tie_word_embeddings=True, **rope(1000000.0, None))),
        "mistral": (transformers.MistralConfig, dict(base, tie_word_embeddings=False, sliding_window=None, **rope(10000.0, None))),
    }


def build(cls, kwargs, tok, folder):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cls(**kwargs)).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.3 * torch.randn_like(p))
    model.save_pretrained(folder, safe_serialization=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"add_bos_token": False, "bos_token": "<s>", "eos_token": "<|im_end|>"}))
    return model


def vauban_trace(binary, folder, bundle):
    subprocess.run([binary, "trace", "--model", str(folder), "--prompt", TEXT, "--raw", "--logprobs",
                    "--raw-tensors", "--layers", "0,1", "--out", str(bundle)], check=True,
                   capture_output=True)
    manifest = json.loads((bundle / "manifest.json").read_text())
    entry = manifest["traces"][0]
    trace = json.loads((bundle / entry["file"]).read_text())
    tensors = load_file(str(bundle / entry["tensors"]["file"]))
    logits = next(tensors[a["id"]] for a in trace["artifacts"] if a["kind"] == "logits")
    acts = {a["layer"]: tensors[a["id"]] for a in trace["artifacts"] if a["kind"] == "activation"}
    return logits, acts


def main():
    binary, out = sys.argv[1], pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    tok, vocab = tokenizer()
    ids = tok.encode(TEXT).ids
    results, failed = {}, False
    with tempfile.TemporaryDirectory() as tmp:
        for name, (cls, kwargs) in cases(vocab).items():
            folder = pathlib.Path(tmp) / name
            model = build(cls, kwargs, tok, folder)
            with torch.no_grad():
                ref = model(torch.tensor([ids]), output_hidden_states=True)
                greedy = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False,
                                        eos_token_id=3, pad_token_id=3)
            ref_logits = ref.logits[0].numpy()
            logits, acts = vauban_trace(binary, folder, pathlib.Path(tmp) / f"{name}.bundle")
            d_logit = float(np.abs(ref_logits - logits).max())
            # hidden_states[i + 1] is the residual stream after block i (the
            # last entry has the final norm applied, so blocks 0 and 1 only).
            d_act = max(float(np.abs(ref.hidden_states[l + 1][0].numpy() - acts[l][0]).max()) for l in (0, 1))
            ref_text = tok.decode(greedy[0, len(ids):].tolist(), skip_special_tokens=False)
            gen = subprocess.run([binary, "generate", "--model", str(folder), "--prompt", TEXT, "--raw",
                                  "--max-tokens", "8"], check=True, capture_output=True, text=True)
            ours = gen.stdout.rstrip("\n")
            ok = d_logit < LOGIT_TOL and d_act < ACT_TOL and ref_text.replace("<|im_end|>", "") == ours
            failed |= not ok
            results[name] = {"max_abs_logit_diff": d_logit, "max_abs_activation_diff": d_act,
                             "logit_scale": float(np.abs(ref_logits).max()),
                             "transformers_greedy": ref_text, "vauban_greedy": ours, "ok": ok}
            print(f"{name:18} max|Δlogit| {d_logit:.2e} (|logit| ≤ {results[name]['logit_scale']:.1f})  "
                  f"max|Δact| {d_act:.2e}  greedy {'same' if ref_text.replace('<|im_end|>', '') == ours else 'DIFFERENT'}"
                  f"  {'ok' if ok else 'FAIL'}")
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "text": TEXT,
            "tolerances": {"logit": LOGIT_TOL, "activation": ACT_TOL}, "models": results}
    (out / "compare_transformers.json").write_text(json.dumps(meta, indent=2))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

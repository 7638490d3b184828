"""Check the LoRA adapters vauban writes against the tools that load them.

    python check_lora.py VAUBAN LLAMA_CPP_DIR OUT_DIR [--real SMOLLM2_GGUF]

1. Orthogonalization as an adapter. A tiny random model of each family in
   FAMILIES is built with transformers; `vauban model orthogonalize` writes
   it once as a whole edited model (`--out`) and once as a rank-1 adapter
   (`--lora`). The adapter is applied
   - by PEFT (`PeftModel.from_pretrained` on the HF base), whose logits are
     compared with transformers' logits of the edited model;
   - by vauban (`vauban trace --adapter` on the HF base), against the same.
   For llama, llama.cpp's converter makes f32 GGUFs of the base and of the
   edited model, and `llama-server --lora adapter.gguf` on the base is
   compared with `llama-server` on the edited file (greedy tokens and the
   whole next-token distribution at each step), and `vauban trace --adapter
   adapter.gguf` on the base GGUF with llama-server's adapted run.
2. Extraction. The tiny llama is fine-tuned synthetically:
   - a rank-2 change of every block matrix: `vauban model lora --rank 2`
     must recover it (PEFT's base + adapter gives the tuned model's logits,
     every matrix keeps a share of 1);
   - a change of two matrices in two layers: only those are in the
     adapter, and PEFT loads it (its modules named exactly);
   - a full-rank change of two matrices and of a norm weight: `--rank 4`
     must report per matrix the share its factors keep (checked from the
     PEFT tensors it wrote), within 0.1% of the best rank-4 share (the
     singular values numpy finds) and never above it, and list the norm
     as not carried.
3. With --real: SmolLM2-135M-Instruct's Q4_1 file, orthogonalized along a
   random direction as an adapter; `llama-server -m Q4_1 --lora` against
   `vauban trace --adapter` on the same file, as compare_llama_cpp.py
   compares a quantized file (KL of the next-token distributions, greedy
   tokens), and the adapter's effect against the base's own run.

Writes OUT_DIR/check_lora.json; prints one line per check; exits 1 when a
check fails.
"""

import argparse
import json
import math
import pathlib
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors.numpy import load_file

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import compare_llama_cpp as cl  # noqa: E402
import compare_transformers as ct  # noqa: E402

FAMILIES = ["llama", "qwen3", "gemma2"]
LOGIT_TOL = 2e-4  # max |Δlogit| between f32 runs of the same weights
LLAMA_LOGPROB_TOL = 1e-3  # llama.cpp's adapter (an extra matmul) vs merged weights
REAL_KL_TOL = 0.05  # a quantized file, vauban against llama.cpp (as compare_llama_cpp.py)


def peft_logits(base_folder, adapter, ids):
    import peft
    base = transformers.AutoModelForCausalLM.from_pretrained(base_folder, attn_implementation="eager").float()
    model = peft.PeftModel.from_pretrained(base, str(adapter)).eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def hf_logits(folder, ids):
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").float().eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def vauban_logits(binary, model, bundle, adapter=None):
    """The prompt's ids and logits from `vauban trace` (with the adapter
    applied)."""
    extra = ["--adapter", str(adapter)] if adapter else []
    ct.run([binary, "trace", "--model", str(model), *extra, "--prompt", ct.TEXT, "--raw", "--logprobs",
            "--raw-tensors", "--max-tokens", "1", "--out", str(bundle)])
    manifest = json.loads((bundle / "manifest.json").read_text())
    entry = manifest["traces"][0]
    trace = json.loads((bundle / entry["file"]).read_text())
    tensors = load_file(str(bundle / entry["tensors"]["file"]))
    arts = trace["artifacts"]
    prompt = next(a["data"]["ids"] for a in arts
                  if a["kind"] == "tokens" and a.get("labels", {}).get("role") == "prompt")
    return prompt, next(tensors[a["id"]] for a in arts if a["kind"] == "logits")


def server_run(llama, gguf, prompt, vocab, lora=None, n=8):
    """llama-server's greedy ids after `prompt` (ids) and each step's
    next-token distribution ({id: logprob}, all `vocab` tokens)."""
    extra = ("--lora", str(lora)) if lora else ()
    with cl.serving(llama, gguf, extra) as port:
        out = cl.post(port, "/completion", {"prompt": prompt, "n_predict": n, "temperature": 0.0,
                                            "n_probs": vocab, "cache_prompt": False,
                                            "samplers": ["top_k"], "top_k": 1})
    probs = out["completion_probabilities"]
    return [p["id"] for p in probs], [{q["id"]: q["logprob"] for q in p["top_logprobs"]} for p in probs]


def kl(p_logs, q_logs):
    """KL(p‖q) of two distributions given as {id: logprob} over the same ids."""
    return sum(math.exp(lp) * (lp - q_logs[i]) for i, lp in p_logs.items())


def max_logprob_diff(a, b):
    return max(abs(a[i] - b[i]) for i in a)


def orthogonalization(binary, llama, tmp, name, tok):
    folder = tmp / name
    if name == "llama":
        # llama.cpp's own test model: a SentencePiece vocabulary its
        # converter reads, an output layer steered to printable tokens (the
        # server refuses to return others).
        cls, kwargs, kind = cl.cases()[name]
        cl.build(name, cls, kwargs, kind, folder)
    else:
        cls, kwargs = ct.cases(tok.get_vocab_size())[name]
        ct.build(cls, kwargs, tok, folder, ct.TEMPLATES.get(name))
    # A random direction; for llama.cpp's test model, in the residual
    # stream's first half only (its second half holds the constant that
    # keeps its output printable, which no block may write to).
    hidden = transformers.AutoConfig.from_pretrained(folder).hidden_size
    r = np.random.default_rng(5).standard_normal(hidden).astype(np.float32)
    if name == "llama":
        r[hidden // 2:] = 0
    direction = tmp / f"{name}.direction.npy"
    np.save(direction, r)
    # The edit made here, in torch: W ← W − r̂(r̂ᵀW) on every block's
    # attention output and MLP down projection.
    edited, adapter = tmp / f"{name}.edited", tmp / f"{name}.lora"
    unit = torch.tensor(r / np.linalg.norm(r)).unsqueeze(1)
    tuned_copy(folder, edited, lambda n, p: -unit @ (unit.T @ p)
               if n.endswith(("o_proj.weight", "down_proj.weight")) else None)
    said = ct.run([binary, "model", "orthogonalize", "--model", str(folder), "--direction", str(direction),
                   "--lora", str(adapter)])
    config = json.loads((adapter / "adapter_config.json").read_text())
    # Every side runs the ids vauban's tokenizer gives.
    ids, by_vauban = vauban_logits(binary, folder, tmp / f"{name}.adapted.bundle", adapter)
    base = hf_logits(folder, ids)
    truth = hf_logits(edited, ids)
    by_peft = peft_logits(folder, adapter, ids)
    r = {
        "summary": said.strip().splitlines()[0],
        "rank": config["r"],
        "target_modules": sorted(config["target_modules"]),
        "effect": float(np.abs(truth - base).max()),
        "peft_vs_edited": float(np.abs(by_peft - truth).max()),
        "vauban_adapter_vs_edited": float(np.abs(by_vauban - truth).max()),
    }
    r["ok"] = (r["peft_vs_edited"] < LOGIT_TOL and r["vauban_adapter_vs_edited"] < LOGIT_TOL
               and r["effect"] > 100 * LOGIT_TOL)
    if name == "llama":
        r.update(llama_cpp_orthogonalization(binary, llama, tmp, folder, edited, adapter, truth.shape[-1]))
        r["ok"] = r["ok"] and r["llama_cpp_ok"]
    return r


def llama_cpp_orthogonalization(binary, llama, tmp, folder, edited, adapter, vocab):
    base_gguf, edited_gguf = tmp / "llama.f32.gguf", tmp / "llama.edited.f32.gguf"
    cl.convert(llama, folder, base_gguf)
    cl.convert(llama, edited, edited_gguf)
    # vauban on the GGUF base with the GGUF adapter; llama.cpp runs its ids.
    ids, ours = vauban_logits(binary, base_gguf, tmp / "llama.gguf-adapted.bundle", adapter / "adapter.gguf")
    adapted_ids, adapted = server_run(llama, base_gguf, ids, vocab, lora=adapter / "adapter.gguf")
    edited_ids, merged = server_run(llama, edited_gguf, ids, vocab)
    steps = min(len(adapted), len(merged))
    diff = max(max_logprob_diff(adapted[s], merged[s]) for s in range(steps))
    ours_lp = torch.log_softmax(torch.tensor(ours[-1]), -1).numpy()
    vs_llama = max(abs(float(ours_lp[i]) - lp) for i, lp in adapted[0].items())
    return {
        "llama_server_lora_vs_edited": diff,
        "llama_server_same_greedy": adapted_ids == edited_ids,
        "vauban_gguf_adapter_vs_llama_server": vs_llama,
        "llama_cpp_ok": diff < LLAMA_LOGPROB_TOL and adapted_ids == edited_ids and vs_llama < LLAMA_LOGPROB_TOL,
    }


def tuned_copy(folder, dest, change):
    """`folder`'s model with `change(name, weight)` added to each weight
    (the tokenizer's files copied as they are)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            d = change(name, p)
            if d is not None:
                p.add_(d)
    model.save_pretrained(dest, safe_serialization=True)
    for f in folder.iterdir():
        if f.name.startswith("tokenizer") or f.name == "special_tokens_map.json":
            shutil.copy(f, dest / f.name)
    return model


def extraction(binary, tmp, tok, ids):
    cls, kwargs = ct.cases(tok.get_vocab_size())["llama"]
    folder = tmp / "x.base"
    ct.build(cls, kwargs, tok, folder)
    gen = torch.Generator().manual_seed(1)
    matrices = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

    def low_rank(name, p):
        if not name.endswith(tuple(f"{m}.weight" for m in matrices)):
            return None
        u = torch.randn(p.shape[0], 2, generator=gen)
        v = torch.randn(2, p.shape[1], generator=gen)
        return 0.05 * u @ v

    out = {}
    tuned = tmp / "x.rank2"
    tuned_copy(folder, tuned, low_rank)
    adapter = tmp / "x.rank2.lora"
    report = json.loads(ct.run([binary, "model", "lora", "--base", str(folder), "--tuned", str(tuned),
                                "--rank", "2", "--out", str(adapter), "--json"]))
    by_peft = peft_logits(folder, adapter, ids)
    truth = hf_logits(tuned, ids)
    out["rank2"] = {
        "matrices": len(report["matrices"]),
        "min_kept_share": min(m["kept_share"] for m in report["matrices"]),
        "kept_share": report["kept_share"],
        "peft_vs_tuned": float(np.abs(by_peft - truth).max()),
        "effect": float(np.abs(truth - hf_logits(folder, ids)).max()),
    }
    out["rank2"]["ok"] = (out["rank2"]["matrices"] == 7 * kwargs["num_hidden_layers"]
                          and out["rank2"]["min_kept_share"] > 1 - 1e-6
                          and out["rank2"]["peft_vs_tuned"] < LOGIT_TOL
                          and out["rank2"]["effect"] > 100 * LOGIT_TOL)

    # Two matrices of two layers: unchanged matrices stay out of the
    # adapter, so PEFT gets the exact modules (a regular expression).
    def sparse(name, p):
        if name in ("model.layers.0.self_attn.o_proj.weight", "model.layers.2.self_attn.q_proj.weight"):
            return 0.1 * torch.randn(p.shape[0], 1, generator=gen) @ torch.randn(1, p.shape[1], generator=gen)
        return None

    tuned = tmp / "x.sparse"
    tuned_copy(folder, tuned, sparse)
    adapter = tmp / "x.sparse.lora"
    report = json.loads(ct.run([binary, "model", "lora", "--base", str(folder), "--tuned", str(tuned),
                                "--rank", "1", "--out", str(adapter), "--json"]))
    config = json.loads((adapter / "adapter_config.json").read_text())
    out["sparse"] = {
        "in_adapter": sorted(f"{m['layer']}.{m['matrix']}" for m in report["matrices"] if m["in_adapter"]),
        "target_modules": config["target_modules"],
        "peft_vs_tuned": float(np.abs(peft_logits(folder, adapter, ids) - hf_logits(tuned, ids)).max()),
    }
    out["sparse"]["ok"] = (out["sparse"]["in_adapter"] == ["0.attn_output", "2.attn_q"]
                           and isinstance(config["target_modules"], str)
                           and out["sparse"]["peft_vs_tuned"] < LOGIT_TOL)

    # A full-rank change of q and o (and a norm weight an adapter cannot carry).
    deltas = {}

    def full_rank(name, p):
        if name.endswith(("q_proj.weight", "o_proj.weight")) or name == "model.layers.1.input_layernorm.weight":
            d = 0.02 * torch.randn(p.shape, generator=gen)
            deltas[name] = d.numpy()
            return d
        return None

    tuned = tmp / "x.full"
    tuned_copy(folder, tuned, full_rank)
    adapter = tmp / "x.full.lora"
    report = json.loads(ct.run([binary, "model", "lora", "--base", str(folder), "--tuned", str(tuned),
                                "--rank", "4", "--matrices", "attn_q,attn_output", "--out", str(adapter),
                                "--json"]))
    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    hf = {"attn_q": "self_attn.q_proj", "attn_output": "self_attn.o_proj"}
    worst_vs_best, worst_vs_factors, above = 1.0, 0.0, False
    for m in report["matrices"]:
        module = f"model.layers.{m['layer']}.{hf[m['matrix']]}"
        delta = deltas[module + ".weight"].astype(np.float64)
        s = np.linalg.svd(delta, compute_uv=False)
        best = math.sqrt((s[:4] ** 2).sum()) / math.sqrt((s ** 2).sum())
        b = tensors[f"base_model.model.{module}.lora_B.weight"].astype(np.float64)
        a = tensors[f"base_model.model.{module}.lora_A.weight"].astype(np.float64)
        factors = np.linalg.norm(b @ a) / np.linalg.norm(delta)
        worst_vs_best = min(worst_vs_best, m["kept_share"] / best)
        worst_vs_factors = max(worst_vs_factors, abs(m["kept_share"] - factors))
        above = above or m["kept_share"] > best * (1 + 1e-6)
    out["full_rank"] = {
        "matrices": len(report["matrices"]),
        "kept_share": report["kept_share"],
        "worst_share_vs_best": worst_vs_best,
        "worst_share_vs_factors": worst_vs_factors,
        "above_best": above,
        "not_carried": [t["tensor"] for t in report["not_carried"]],
    }
    out["full_rank"]["ok"] = (out["full_rank"]["matrices"] == 2 * kwargs["num_hidden_layers"]
                              and worst_vs_best > 0.999 and worst_vs_factors < 1e-5 and not above
                              and out["full_rank"]["not_carried"] == ["blk.1.attn_norm.weight"])
    return out


def real(binary, llama, tmp, gguf):
    """SmolLM2's Q4_1 file with an orthogonalization adapter: llama.cpp and
    vauban each apply the GGUF adapter to the quantized base."""
    hidden = 576
    direction = tmp / "smollm2.direction.npy"
    np.save(direction, np.random.default_rng(3).standard_normal(hidden).astype(np.float32))
    adapter = tmp / "smollm2.lora"
    ct.run([binary, "model", "orthogonalize", "--model", str(gguf), "--direction", str(direction),
            "--lora", str(adapter)])
    vocab = 49152
    base_ids, base = server_run(llama, gguf, ct.TEXT, vocab, n=4)
    adapted_ids, adapted = server_run(llama, gguf, ct.TEXT, vocab, lora=adapter / "adapter.gguf", n=4)
    bundle = tmp / "smollm2.adapted.bundle"
    ct.run([binary, "trace", "--model", str(gguf), "--adapter", str(adapter / "adapter.gguf"), "--prompt",
            ct.TEXT, "--raw", "--logprobs", "--top-logprobs", str(vocab), "--raw-tensors", "--max-tokens", "4",
            "--out", str(bundle)])
    manifest = json.loads((bundle / "manifest.json").read_text())
    entry = manifest["traces"][0]
    trace = json.loads((bundle / entry["file"]).read_text())
    tensors = load_file(str(bundle / entry["tensors"]["file"]))
    role = lambda a, r: a.get("labels", {}).get("role") == r  # noqa: E731
    arts = trace["artifacts"]
    greedy = next(a["data"]["ids"] for a in arts if a["kind"] == "tokens" and role(a, "completion"))
    top = next(tensors[a["id"]] for a in arts if a["kind"] == "logprobs" and role(a, "continuation"))
    top_ids = next(tensors[a["id"]] for a in arts if a["kind"] == "tokens" and role(a, "continuation_top_k"))
    ours = [{int(i): float(v) for i, v in zip(i_row, row)} for i_row, row in zip(top_ids, top)]
    # The distributions decoded from the same tokens: up to where the greedy tokens part.
    n = min(len(greedy), len(adapted_ids))
    parted = next((i for i in range(n) if greedy[i] != adapted_ids[i]), None)
    steps = n if parted is None else parted + 1
    worst_kl = max(kl(adapted[s], ours[s]) for s in range(steps))
    effect = kl(adapted[0], base[0])
    r = {"kl_vauban_vs_llama_server": worst_kl, "same_greedy": greedy[:n] == adapted_ids[:n],
         "adapter_effect_kl": effect, "steps": steps}
    r["ok"] = worst_kl < REAL_KL_TOL and r["same_greedy"] and effect > 10 * worst_kl
    return r


def main():
    args = argparse.ArgumentParser()
    args.add_argument("vauban")
    args.add_argument("llama_cpp")
    args.add_argument("out")
    args.add_argument("--real", metavar="GGUF", help="SmolLM2-135M-Instruct's Q4_1 file")
    args = args.parse_args()
    binary, llama, out = args.vauban, pathlib.Path(args.llama_cpp), pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    transformers.logging.set_verbosity_error()
    tok, _ = ct.tokenizer()
    ids = tok.encode(ct.TEXT).ids
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for name in FAMILIES:
            results[f"orthogonalize_{name}"] = orthogonalization(binary, llama, tmp, name, tok)
        results.update({f"extract_{k}": v for k, v in extraction(binary, tmp, tok, ids).items()})
        if args.real:
            results["real_smollm2"] = real(binary, llama, tmp, pathlib.Path(args.real))
    for name, r in results.items():
        print(f"{name}: {'ok' if r['ok'] else 'FAILED'} {json.dumps({k: v for k, v in r.items() if k != 'ok'})}")
    (out / "check_lora.json").write_text(json.dumps({"checks": results}, indent=1))
    sys.exit(0 if all(r["ok"] for r in results.values()) else 1)


if __name__ == "__main__":
    main()

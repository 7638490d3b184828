"""Cross-check vauban's forward against Hugging Face transformers.

Builds a tiny random model of every family vauban runs with transformers
(llama, llama with llama3 RoPE scaling and tied embeddings, qwen2 with
Q/K/V biases, mistral with a sliding window, qwen3, gemma2, gemma3,
olmo2, phi3), saves each as an HF folder, runs the same prompt through
transformers and through the `vauban` binary, and compares the logits, the
residual stream after every block, and greedy continuations. The shapes
are chosen so every difference a family has is exercised: head widths
that are not hidden / heads, a sliding window shorter than the prompt,
soft-caps that bite, a query scale that is not 1/sqrt(head_dim), two RoPE
bases with scaling on the global layers only. Needs torch, transformers,
tokenizers, safetensors and numpy (scripts/setup-reference.sh); no network.

    python3 scripts/reference/compare_transformers.py VAUBAN OUT_DIR [--executor E] [--only a,b]

Prints one line per model and writes OUT_DIR/compare_transformers.json.
Exit 1 when a model differs beyond the tolerances stated below.
"""

import argparse
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
ACT_TOL = 2e-4  # max |Δ| of router probabilities
# max |Δ| of residual activations, relative to the largest |activation| of
# the block (these random models reach 80; f32 rounds at about 1e-7 of it
# per operation)
ACT_REL_TOL = 5e-6
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


def gemma3_rope(local_theta, global_theta, factor):
    """Gemma 3's two RoPE bases, with linear scaling on the global layers."""
    major = int(transformers.__version__.split(".")[0])
    if major >= 5:
        return {"rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": local_theta},
            "full_attention": {"rope_type": "linear", "factor": factor, "rope_theta": global_theta}}}
    return {"rope_theta": global_theta, "rope_local_base_freq": local_theta,
            "rope_scaling": {"rope_type": "linear", "factor": factor}}


def cases(vocab):
    base = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
                initializer_range=0.3, bos_token_id=0, eos_token_id=3)
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    # Four layers, heads 24 wide (not 64 / 4), a window of 5 positions
    # (the prompt is longer).
    wide = dict(base, num_hidden_layers=4, head_dim=24)
    gemma = dict(wide, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=20,
                 sliding_window=5, tie_word_embeddings=True)
    return {
        "llama": (transformers.LlamaConfig, dict(base, tie_word_embeddings=False, **rope(10000.0, None))),
        "llama3_rope_tied": (transformers.LlamaConfig, dict(base, tie_word_embeddings=True, **rope(500000.0, llama3))),
        "qwen2_bias": (transformers.Qwen2Config, dict(base, tie_word_embeddings=True, **rope(1000000.0, None))),
        "mistral": (transformers.MistralConfig, dict(base, tie_word_embeddings=False, sliding_window=None, **rope(10000.0, None))),
        "mistral_window": (transformers.MistralConfig, dict(base, tie_word_embeddings=False, sliding_window=5, **rope(10000.0, None))),
        "qwen3": (transformers.Qwen3Config, dict(wide, tie_word_embeddings=False, **rope(1000000.0, None))),
        # Soft-caps low enough that they change the scores and the logits.
        "gemma2": (transformers.Gemma2Config, dict(gemma, attn_logit_softcapping=3.0,
                                                   final_logit_softcapping=2.0, **rope(10000.0, None))),
        # Layers 0, 1 and 3 slide (local base 10k), layer 2 is global (1M, linear x8).
        "gemma3": (transformers.Gemma3TextConfig, dict(gemma, final_logit_softcapping=None,
                                                       attn_logit_softcapping=None,
                                                       layer_types=["sliding_attention", "sliding_attention",
                                                                    "full_attention", "sliding_attention"],
                                                       **gemma3_rope(10000.0, 1000000.0, 8.0))),
        "olmo2": (transformers.Olmo2Config, dict(base, num_hidden_layers=4, tie_word_embeddings=False,
                                                 **rope(500000.0, None))),
        # Fused QKV and gate/up matrices, a window of 5 on every layer.
        "phi3": (transformers.Phi3Config, dict(base, tie_word_embeddings=False, sliding_window=5, pad_token_id=0,
                                               **rope(10000.0, None))),
        # A mixture of 4 experts, 2 per token, with and without renormalising.
        "qwen3_moe": (transformers.Qwen3MoeConfig, dict(wide, tie_word_embeddings=False, num_experts=4,
                                                        num_experts_per_tok=2, moe_intermediate_size=32,
                                                        norm_topk_prob=False, **rope(1000000.0, None))),
        "qwen3_moe_norm": (transformers.Qwen3MoeConfig, dict(wide, tie_word_embeddings=False, num_experts=4,
                                                             num_experts_per_tok=2, moe_intermediate_size=32,
                                                             norm_topk_prob=True, **rope(1000000.0, None))),
        # Three quarters of each head rotate (Phi-4-mini's partial rotary).
        "phi3_partial": (transformers.Phi3Config, dict(base, tie_word_embeddings=False, sliding_window=None, pad_token_id=0,
                                                       **rope(10000.0, {"partial_rotary_factor": 0.75}))),
        # LongRoPE as Phi-4-mini has it (three quarters rotate): a context
        # of 16 first, 128 now, so the 34-token prompt runs the long factors.
        "phi3_longrope": (transformers.Phi3Config, dict(
            base, tie_word_embeddings=False, sliding_window=None, pad_token_id=0,
            max_position_embeddings=128, original_max_position_embeddings=16,
            **rope(10000.0, {"rope_type": "longrope", "partial_rotary_factor": 0.75,
                             "original_max_position_embeddings": 16,
                             "short_factor": [1.0, 1.2, 1.5, 2.0, 3.0, 4.0],
                             "long_factor": [1.5, 2.0, 3.0, 4.0, 6.0, 8.0]}))),
        # A context of 36 first: the prompt runs the short factors, and the
        # greedy tokens past the 36th position the long ones (the step that
        # crosses runs the whole sequence again, as Phi-3's generate does).
        "phi3_longrope_switch": (transformers.Phi3Config, dict(
            base, tie_word_embeddings=False, sliding_window=None, pad_token_id=0,
            max_position_embeddings=144, original_max_position_embeddings=36,
            **rope(10000.0, {"rope_type": "longrope", "original_max_position_embeddings": 36,
                             "short_factor": [1.0, 1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.0],
                             "long_factor": [1.0, 1.5, 2.5, 4.0, 8.0, 16.0, 32.0, 64.0]}))),
    }


# Each family's chat template (scripts/reference/templates/), by case.
TEMPLATES = {"gemma2": "gemma.jinja", "gemma3": "gemma3.jinja", "qwen3": "qwen3.jinja",
             "phi3": "phi3.jinja", "phi3_partial": "phi3.jinja", "olmo2": "olmo2.jinja",
             "phi3_longrope": "phi3.jinja"}
SYSTEM = "Answer in one word."


def build(cls, kwargs, tok, folder, template=None):
    torch.manual_seed(0)
    # Eager attention: the implementation every family (soft-caps included) supports.
    model = transformers.AutoModelForCausalLM.from_config(
        cls(**kwargs), attn_implementation="eager").float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.3 * torch.randn_like(p))
            elif name.endswith("mlp.gate.weight") or ".experts." in name:
                # The router and the experts' stacks (some start at zero or
                # uninitialised): random, so the routing is not a tie.
                p.copy_(0.3 * torch.randn_like(p))
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    model.save_pretrained(folder, safe_serialization=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {"add_bos_token": False, "bos_token": "<s>", "eos_token": "<|im_end|>", "unk_token": None,
              "tokenizer_class": "PreTrainedTokenizerFast"}
    if template:
        config["chat_template"] = (pathlib.Path(__file__).parent / "templates" / template).read_text()
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return model


def chat_ids(binary, executor, folder, system, bundle):
    """vauban's prompt ids for TEXT through the model's chat template (with
    a system message when given); None when the template refuses it."""
    cmd = [binary, "trace", "--model", str(folder), "--executor", executor, "--prompt", TEXT,
           "--max-tokens", "0", "--out", str(bundle)]
    if system:
        cmd += ["--system", system]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        if "refused the conversation" in done.stderr:
            return None
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    manifest = json.loads((bundle / "manifest.json").read_text())
    trace = json.loads((bundle / manifest["traces"][0]["file"]).read_text())
    return next(a["data"]["ids"] for a in trace["artifacts"]
                if a["kind"] == "tokens" and a.get("labels", {}).get("role") == "prompt")


def reference_chat_ids(folder, system):
    """transformers' apply_chat_template ids; None when the template raises."""
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    messages = ([{"role": "system", "content": SYSTEM}] if system else []) + [
        {"role": "user", "content": TEXT}]
    try:
        out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    except Exception as e:  # jinja2's TemplateError from raise_exception
        if "TemplateError" in type(e).__name__ or "not supported" in str(e):
            return None
        raise
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def run(cmd):
    """Runs vauban, showing its error output when it fails."""
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def vauban_trace(binary, executor, folder, layers, bundle):
    """The prompt's logits, residual streams and (a mixture of experts')
    router probabilities by layer, and 8 greedy tokens' ids."""
    run([binary, "trace", "--model", str(folder), "--executor", executor, "--prompt", TEXT, "--raw",
         "--logprobs", "--raw-tensors", "--layers", ",".join(map(str, layers)), "--block-outputs",
         "--max-tokens", "8", "--out", str(bundle)])
    manifest = json.loads((bundle / "manifest.json").read_text())
    entry = manifest["traces"][0]
    trace = json.loads((bundle / entry["file"]).read_text())
    tensors = load_file(str(bundle / entry["tensors"]["file"]))
    arts = trace["artifacts"]
    logits = next(tensors[a["id"]] for a in arts if a["kind"] == "logits")
    site = lambda a: a.get("labels", {}).get("site", "resid_post")  # noqa: E731
    acts = {a["layer"]: tensors[a["id"]] for a in arts if a["kind"] == "activation" and site(a) == "resid_post"}
    routers = {a["layer"]: tensors[a["id"]] for a in arts if a["kind"] == "activation" and site(a) == "router"}
    greedy = next(a["data"]["ids"] for a in arts
                  if a["kind"] == "tokens" and a.get("labels", {}).get("role") == "completion")
    return logits, acts, greedy, routers


def main():
    args = argparse.ArgumentParser()
    args.add_argument("vauban")
    args.add_argument("out")
    args.add_argument("--executor", default="candle")
    args.add_argument("--only", default="", help="comma-separated case names")
    args.add_argument("--skip", default="", help="comma-separated case names not to run")
    args.add_argument("--keep", default="", help="a folder to keep the tiny models in")
    args = args.parse_args()
    binary, out = args.vauban, pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tok, vocab = tokenizer()
    ids = tok.encode(TEXT).ids
    only = [c for c in args.only.split(",") if c]
    skip = [c for c in args.skip.split(",") if c]
    results, failed = {}, False
    with tempfile.TemporaryDirectory() as tmp:
        models = pathlib.Path(args.keep or tmp)
        for name, (cls, kwargs) in cases(vocab).items():
            if (only and name not in only) or name in skip:
                continue
            folder = models / name
            model = build(cls, kwargs, tok, folder, TEMPLATES.get(name))
            moe = "moe" in name
            with torch.no_grad():
                ref = model(torch.tensor([ids]), output_hidden_states=True,
                            **({"output_router_logits": True} if moe else {}))
                greedy = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False,
                                        eos_token_id=3, pad_token_id=3)
            ref_logits = ref.logits[0].numpy()
            # hidden_states[i + 1] is the residual stream after block i; the
            # last entry has the final norm applied, so every block but the
            # last (whose output the logits check).
            layers = list(range(kwargs["num_hidden_layers"] - 1))
            logits, acts, ours, routers = vauban_trace(binary, args.executor, folder, layers,
                                                       pathlib.Path(tmp) / f"{name}.bundle")
            # The router's probabilities, the evidence of which experts each
            # token used: transformers' softmax of its router logits.
            d_router = 0.0
            if moe:
                if sorted(routers) != layers:
                    sys.exit(f"{name}: router probabilities recorded at {sorted(routers)}, not {layers}")
                for l in layers:
                    theirs_p = torch.softmax(ref.router_logits[l].float(), -1).numpy()
                    d_router = max(d_router, float(np.abs(theirs_p - routers[l][0]).max()))
            d_logit = float(np.abs(ref_logits - logits).max())
            d_act = max(float(np.abs(ref.hidden_states[l + 1][0].numpy() - acts[l][0]).max()) for l in layers)
            d_act_rel = max(float(np.abs(ref.hidden_states[l + 1][0].numpy() - acts[l][0]).max()
                                  / max(1.0, float(ref.hidden_states[l + 1][0].abs().max())))
                            for l in layers)
            act_scale = max(float(ref.hidden_states[l + 1][0].abs().max()) for l in layers)
            # vauban's export of the model, read back by transformers: the
            # same logits (config.json in the family's words, Gemma's norms
            # stored as transformers reads them).
            exported = pathlib.Path(tmp) / f"{name}.export"
            run([binary, "model", "export", "--model", str(folder), "--executor", args.executor,
                 "--out", str(exported)])
            with torch.no_grad():
                back = transformers.AutoModelForCausalLM.from_pretrained(
                    exported, attn_implementation="eager").float().eval()
                d_export = float(np.abs(back(torch.tensor([ids])).logits[0].numpy() - ref_logits).max())
            # The family's chat template, with and without a system message:
            # the same ids as transformers renders and tokenizes, or refused
            # by both (Gemma 2 has no system role).
            chat = {}
            if name in TEMPLATES:
                for system in (None, SYSTEM):
                    key = "system" if system else "user"
                    chat[key] = (chat_ids(binary, args.executor, folder, system,
                                          pathlib.Path(tmp) / f"{name}.{key}.chat"),
                                 reference_chat_ids(folder, system))
            chat_same = all(ours_ids == ref_ids for ours_ids, ref_ids in chat.values())
            # An end-of-sequence token ends both; whether it is listed differs.
            theirs = [t for t in greedy[0, len(ids):].tolist() if t != 3]
            ours = [t for t in ours if t != 3]
            same = theirs == ours
            ok = (d_logit < LOGIT_TOL and d_act_rel < ACT_REL_TOL and same and d_export < LOGIT_TOL and chat_same
                  and d_router < ACT_TOL)
            failed |= not ok
            results[name] = {"max_abs_logit_diff": d_logit, "max_abs_activation_diff": d_act,
                             "export_max_abs_logit_diff": d_export,
                             "chat": {k: {"vauban": a, "transformers": b} for k, (a, b) in chat.items()},
                             "chat_same": chat_same,
                             "router_max_abs_diff": d_router if moe else None,
                             "logit_scale": float(np.abs(ref_logits).max()), "layers": layers,
                             "max_rel_activation_diff": d_act_rel, "activation_scale": act_scale,
                             "transformers_greedy": theirs, "vauban_greedy": ours, "ok": ok}
            print(f"{name:20} max|Δlogit| {d_logit:.2e} (|logit| ≤ {results[name]['logit_scale']:.1f})  "
                  f"max|Δact| {d_act:.2e} (|act| ≤ {act_scale:.0f}) over {len(layers)} blocks  greedy {'same' if same else 'DIFFERENT'}"
                  f"  export max|Δlogit| {d_export:.2e}"
                  f"{'' if not chat else '  chat ' + ('same' if chat_same else 'DIFFERENT')}"
                  f"{'' if not moe else f'  router max|Δp| {d_router:.1e}'}"
                  f"  {'ok' if ok else 'FAIL'}", flush=True)
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "text": TEXT,
            "executor": args.executor, "tokens": len(ids),
            "tolerances": {"logit": LOGIT_TOL, "activation_relative": ACT_REL_TOL, "router": ACT_TOL},
            "models": results}
    (out / "compare_transformers.json").write_text(json.dumps(meta, indent=2))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

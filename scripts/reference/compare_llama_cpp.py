"""Cross-check vauban's GGUF reading against llama.cpp, on every family.

For each family: builds a tiny random model with transformers (with a
SentencePiece tokenizer trained here for the families whose converter reads
one, a byte-level BPE one for the others), converts it with llama.cpp's own
converter (convert_hf_to_gguf.py) to an f32 GGUF, quantizes that with
llama-quantize (a wider llama, every matrix row a multiple of 256 values,
into each preset), reads back the tensor types each file holds, and runs
each file through llama.cpp's llama-server and through `vauban trace`.
Compared: the prompt's token ids (vauban's tokenizer built from the GGUF
metadata against llama.cpp's and against the tokenizer the model was built
with), eight greedy tokens, and the log-probability of each greedy token,
at tolerances stated per tensor type below. What the
GGUF means (norm weights stored as 1 + w, sliding-window patterns, the
query scale, soft-caps, RoPE bases) is llama.cpp's reading of it, so this
checks vauban's reading of the metadata as well as its forward.

    python compare_llama_cpp.py VAUBAN LLAMA_CPP_DIR OUT_DIR [--only a,b] [--no-cache]
    python compare_llama_cpp.py VAUBAN LLAMA_CPP_DIR OUT_DIR --real SMOLLM2_GGUF

`--real` compares instead a trained model of a realistic width (the
`smollm2` case, below): SmolLM2-135M-Instruct, the file the project's
tests fetch (scripts/fetch-model.sh), in each preset.

LLAMA_CPP_DIR is scripts/build-llama-server.sh's cache folder (bin/ and
convert/). Run it with scripts/setup-reference.sh's python. Prints one line
per model and file, writes OUT_DIR/compare_llama_cpp.json, exits 1 when a
comparison fails.

The tiny models and their converted and quantized files are kept in
${VAUBAN_CACHE:-~/.cache/vauban}/reference-models/, each under a key of
everything that makes it (the case, these scripts, the versions of
transformers, torch, sentencepiece and llama.cpp), so a run reuses what an
earlier one built and a change to any of those builds afresh.
"""

import argparse
import contextlib
import hashlib
import itertools
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np
import sentencepiece as spm
import torch
import transformers
from safetensors.numpy import load_file

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import compare_transformers as ct  # noqa: E402

TEXT = "the cat in the hat sat on a mat, then ran in the rain."
# Texts whose ids are compared too: spaces, new lines, characters outside
# the vocabulary (byte fallback), digits, a control token's text.
HARD = ["  two  spaces and\nnew lines\n\n", "Zürich 🙂 naïve 12345 6789", "a"]
# F32 files: max |Δ logprob| of each greedy token, vauban against llama.cpp
# and against transformers (f32 on every side; llama.cpp with its flash
# attention off, whose CPU path rounds to ~2e-3 on these models).
F32_TOLERANCE = 1e-4
# Quantized files: both quantize the activations to 8 bits and round
# differently, so neither matches the other closely; vauban's error
# against the f32 model (transformers) must stay within this multiple of
# llama.cpp's own, plus a floor for files where both are near exact.
QUANT_ERROR_RATIO, QUANT_FLOOR = 2.0, 5e-3
# Quantized files: where the greedy tokens part at a step whose choice
# llama.cpp made by less than this many nats over its runner-up, the two
# rounded differently at a near tie, not read the file differently; the
# files are then compared over the steps before it (at least one). The
# issue's rule: "the same top token except near ties". F32 files must
# agree at every step.
NEAR_TIE = 0.15
# Every file, quantized or not: at each step both decoded from the same
# tokens, the next-token distributions of vauban and llama.cpp (each in
# full: the vocabularies here are small enough for llama-server to return
# every token's log-probability) must be within this KL divergence,
# KL(llama.cpp || vauban) in nats, and within this |Δ logprob| on
# llama.cpp's 20 most likely tokens. The tolerances. The KL one
# binds every file. The top-20 one binds f32 files, and a quantized file
# where the two agree that closely; where they do not, the two rounded the
# activations differently, not read the file differently (vauban keeps
# each 32-value block's scale in f32, ggml in f16, and llama.cpp's
# repacked products quantize by yet another rule), and vauban's top 20
# must be no further from the f32 model than QUANT_ERROR_RATIO times
# llama.cpp's own distance, as its chosen tokens must. Both happen: these
# tiny random models amplify 4-bit rounding (2.5 nats on Q4_1's chosen
# tokens), and on the trained model (REAL_CASE) the two part by up to 0.68
# nats on the tail of the top 20 (ranks 10-20, 5-7 nats below the top
# token) of four presets, each as far from the f32 model, in opposite
# directions: there the median |Δ| over the top 20 is 0.03-0.19.
KL_TOLERANCE, TOP = 0.05, 20
TOP_TOLERANCE = 0.5
# The types each f32 file is quantized to by llama-quantize, each run by
# vauban's kernels as stored: Q8_0 for every case, and the 5-bit types for
# the dense cases whose random outputs stay comparable at 5 bits. (The
# kernels do not depend on the family. On the mixture, 5-bit rounding of
# random weights flips routing, so greedy tokens part for both vauban and
# llama.cpp, each as far from the f32 model; Phi-3's random output at 5
# bits is no longer text llama-server will return.)
QUANT_TYPES = ["Q8_0"]
FIVE_BIT = ["Q5_0", "Q5_1"]
FIVE_BIT_CASES = {"llama", "qwen3", "gemma2", "gemma3", "olmo2"}
# The wide case (`llama256`): every matrix row a multiple of 256 values
# wide, so llama-quantize writes each preset's own types instead of falling
# back (a K-quant or IQ4_XS block is 256 values: on the other cases' rows of
# 32 to 128 it writes Q4_0, Q5_0, Q5_1, Q8_0 or IQ4_NL in their place). Its file
# for each llama-quantize preset, and the tensor types each must hold (read
# back from the file; llama-quantize's mixtures give more, e.g. Q3_K_M's
# value and down matrices Q5_K and Q4_K, and every preset's output matrix
# Q6_K): together every type vauban runs as stored.
WIDE_CASE = "llama256"
PRESETS = {
    "Q8_0": ["Q8_0"], "Q5_0": ["Q5_0"], "Q5_1": ["Q5_1"], "Q4_0": ["Q4_0"], "Q4_1": ["Q4_1"],
    "Q2_K": ["Q2_K"], "Q3_K_M": ["Q3_K"], "Q4_K_M": ["Q4_K", "Q6_K"], "Q5_K_M": ["Q5_K", "Q6_K"],
    "Q6_K": ["Q6_K"], "IQ4_NL": ["IQ4_NL"], "IQ4_XS": ["IQ4_XS"], "F16": ["F16"], "BF16": ["BF16"],
}
# A trained model of a realistic width (`--real`): SmolLM2-135M-Instruct
# (hidden 576, 30 layers, 9 query and 3 key/value heads of 64, an MLP of
# 1536, 49,152 tokens), whose Q4_1 file the tests fetch, dequantized to F32
# by llama-quantize and quantized from that into each preset, one file at
# a time. The tiny random cases amplify rounding and spread their
# distributions evenly; here the distributions are a trained model's, peaked
# on some steps and flat on others, over a real vocabulary, and the
# tolerances above are met directly. (Its rows of 576 values are not
# multiples of 256: llama-quantize writes the K-quant and IQ4_XS presets'
# fallback types into the matrices that read the residual stream, IQ4_NL,
# Q5_0, Q5_1 or Q8_0, and its own types only into the down matrices, rows
# of 1536. The wide case above covers every type in its own right.) The
# f32 reference is transformers' Llama built from the F32 file's metadata
# and tensors (`from_gguf`).
REAL_CASE = "smollm2"
# F32 against llama.cpp and transformers: thirty layers of f32 sums in
# three orders (llama.cpp's CPU path, vauban's kernels, torch's) round
# further apart than the tiny cases' three layers.
REAL_F32_TOLERANCE = 1e-3
# The bonus for text tokens, by case: the final norm's weight on the
# constant half of the residual stream (see `steer_to_text`).
TEXT_GAIN = {WIDE_CASE: 16.0}
CORPUS = " ".join([
    "the cat in the hat sat on a mat and the dog ran in the rain",
    "a quick brown fox jumps over the lazy dog then ran away",
    "models change when they are tuned quantized merged or steered",
    "numbers like 12 345 and 6789 are split by the tokenizer",
] * 20)


def sentencepiece_tokenizer(folder, vocab, gemma):
    """Trains a SentencePiece BPE model with byte fallback into `folder`,
    normalising nothing, with Gemma's special ids and no space before the
    text (`gemma`), or Llama 2's (and Phi-3's) ids and a space."""
    corpus = folder / "corpus.txt"
    corpus.write_text(CORPUS.replace(" the ", "\nthe "))
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(folder / "tokenizer"), vocab_size=vocab,
        model_type="bpe", byte_fallback=True, character_coverage=1.0,
        **(dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3) if gemma
           else dict(unk_id=0, bos_id=1, eos_id=2, pad_id=3)),
        pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=not gemma, minloglevel=2)
    corpus.unlink()
    (folder / "tokenizer.vocab").unlink()
    return spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))


def cases():
    base = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                rms_norm_eps=1e-5, initializer_range=0.3, head_dim=24, max_position_embeddings=256)
    # llama.cpp reads no query scale from a Gemma GGUF: 1/sqrt(head_dim) but
    # for the 27B models, so these scale by head_dim as llama.cpp will.
    gemma = dict(base, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=24,
                 sliding_window=5, tie_word_embeddings=True)
    return {
        # (config class, kwargs, tokenizer kind)
        "llama": (transformers.LlamaConfig, dict(base, num_hidden_layers=3, head_dim=16,
                                                 tie_word_embeddings=False), "spm"),
        "qwen3": (transformers.Qwen3Config, dict(base, num_hidden_layers=3, tie_word_embeddings=False,
                                                 **ct.rope(1000000.0, None)), "bpe"),
        "gemma2": (transformers.Gemma2Config, dict(gemma, num_hidden_layers=4, attn_logit_softcapping=3.0,
                                                   final_logit_softcapping=2.0, **ct.rope(10000.0, None)),
                   "spm"),
        # llama.cpp slides 5 layers of every 6 (the last global): six layers.
        "gemma3": (transformers.Gemma3TextConfig, dict(gemma, num_hidden_layers=6,
                                                       final_logit_softcapping=None,
                                                       attn_logit_softcapping=None,
                                                       sliding_window_pattern=6,
                                                       **ct.gemma3_rope(10000.0, 1000000.0, 8.0)), "spm"),
        "olmo2": (transformers.Olmo2Config, dict(base, num_hidden_layers=3, head_dim=16,
                                                 tie_word_embeddings=False, **ct.rope(500000.0, None)), "bpe"),
        # A mixture of 4 experts, 2 per token (llama.cpp renormalises the two).
        "qwen3moe": (transformers.Qwen3MoeConfig, dict(base, num_hidden_layers=3, tie_word_embeddings=False,
                                                       num_experts=4, num_experts_per_tok=2,
                                                       moe_intermediate_size=32, norm_topk_prob=True,
                                                       **ct.rope(1000000.0, None)), "bpe"),
        # Fused QKV and gate/up matrices (llama.cpp runs Phi-3 without a window).
        "phi3": (transformers.Phi3Config, dict(base, num_hidden_layers=3, head_dim=16, pad_token_id=0,
                                               sliding_window=None, original_max_position_embeddings=256,
                                               tie_word_embeddings=False, **ct.rope(10000.0, None)), "spm"),
        # LongRoPE (Phi-3 128k): the converter writes both factor sets as
        # tensors and the attention factor as metadata. A context of 16
        # first and 256 now: llama.cpp (its context of 256), vauban (the
        # file's) and transformers (a sequence past 16) all run the long set.
        "phi3_longrope": (transformers.Phi3Config, dict(
            base, num_hidden_layers=3, head_dim=16, pad_token_id=0, sliding_window=None,
            original_max_position_embeddings=16, tie_word_embeddings=False,
            **ct.rope(10000.0, {"rope_type": "longrope", "original_max_position_embeddings": 16,
                                "short_factor": [1.0, 1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.0],
                                "long_factor": [1.0, 1.5, 2.5, 4.0, 8.0, 16.0, 32.0, 64.0]})), "spm"),
        # Rows of 256 (the hidden size) and 512 (the MLP's down matrix), heads
        # of 64: each llama-quantize preset writes its own types (PRESETS).
        WIDE_CASE: (transformers.LlamaConfig, dict(base, hidden_size=256, intermediate_size=512,
                                                    num_hidden_layers=2, head_dim=64,
                                                    tie_word_embeddings=False), "spm"),
    }


def build(name, cls, kwargs, kind, folder):
    """The tiny model and its tokenizer in `folder`; the reference's ids of TEXT."""
    folder.mkdir(parents=True)
    if kind == "spm":
        sp = sentencepiece_tokenizer(folder, 320, gemma=name.startswith("gemma"))
        vocab, bos, eos = sp.get_piece_size(), sp.bos_id(), sp.eos_id()
        ids = [[bos] + sp.encode(t) for t in [TEXT] + HARD]
        pieces = [sp.id_to_piece(i) for i in range(vocab)]
        printable = [not (sp.is_byte(i) or sp.is_control(i) or sp.is_unknown(i)) for i in range(vocab)]
        tok_cls = transformers.GemmaTokenizer if name.startswith("gemma") else transformers.LlamaTokenizer
        tok_cls(vocab_file=str(folder / "tokenizer.model"), add_bos_token=True, bos_token="<bos>",
                eos_token="<eos>", unk_token="<unk>", pad_token="<pad>").save_pretrained(folder)
    else:
        tok, vocab = ct.tokenizer()
        bos, eos = 0, 3
        ids = [tok.encode(t).ids for t in [TEXT] + HARD]
        letters = set("Ġabcdefghijklmnopqrstuvwxyz")
        printable = [all(ch in letters for ch in (tok.id_to_token(i) or "<")) for i in range(vocab)]
        tok.save(str(folder / "tokenizer.json"))
        (folder / "tokenizer_config.json").write_text(json.dumps(
            {"add_bos_token": False, "bos_token": "<s>", "eos_token": "<|im_end|>",
             "tokenizer_class": "PreTrainedTokenizerFast"}))
    # (A larger `vocab_size` in kwargs pads the tokenizer's vocabulary.)
    config = cls(**{"vocab_size": vocab, "bos_token_id": bos, "eos_token_id": eos, **kwargs})
    printable += [False] * (config.vocab_size - len(printable))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").float()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.copy_((0.0 if name.startswith("gemma") else 1.0) + 0.1 * torch.randn_like(p))
            elif pname.endswith("mlp.gate.weight") or ".experts." in pname:
                p.copy_(0.3 * torch.randn_like(p))
        if not config.tie_word_embeddings:
            steer_to_text(model, printable, TEXT_GAIN.get(name, 1.0))
    model.save_pretrained(folder, safe_serialization=True)
    return ids, model.eval()


def steer_to_text(model, printable, gain=1.0):
    """Makes the random model's greedy tokens printable text, which
    llama-server's completion endpoint insists on (it parses what it
    returns, and random bytes are not UTF-8): the residual stream's second
    half (32 dimensions at a hidden size of 64, one block of 32 as Q8_0
    quantizes it) holds a constant 1 no block writes to, and the output
    matrix reads it as a bonus for text tokens and a penalty for bytes and
    control tokens. A 32-value block of equal values quantizes to within
    its f16 scale's rounding (6e-5), so the 32-value types' rounding is the
    random half's alone; a K-quant's sub-blocks share their super-block's
    scales with random values and round the constant too (by up to 6e-2 in
    the wide case's Q2_K embeddings, 5e-3 in its Q6_K output matrices),
    the same for both readers. The first half and every other weight stay
    random.

    The final norm's weight on the constant half is `gain`, 1 but for the
    wide case. Each block adds to the random half about
    √fan-in · initializer_range times what it reads, while the constant
    stays 1, and the final RMSNorm divides both halves by the whole
    vector's RMS: over the greedy steps the random half's RMS before that
    norm is 24 at a hidden size of 64 (three blocks) and 150 at 256 (two
    blocks, an MLP of 512), where the constant's bonus comes to ±1.2
    against random logits of σ 4.9 (±1.9 against 2.5 at 64): greedy tokens
    were bytes, and llama-server answered HTTP 500. A gain of 16 makes the
    bonus ±19 and puts the best text token at least 29 above any other at
    every step of the f32 model, without touching what the blocks compute
    (each reads the stream through its own norm; only the output matrix
    reads the final one): every weight stays as random as at 64
    (initializer_range 0.3), the output matrix's constant half ±1, and
    norm weights are F32 in every file, so the gain is not rounded. A
    larger constant in the embeddings or a smaller initializer_range made
    text too, but changed what every block reads (the constant then
    dominates the normalised input)."""
    half = model.config.hidden_size // 2
    model.get_input_embeddings().weight[:, half:] = 1.0
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight[half:, :] = 0.0
        if hasattr(layer.mlp, "experts"):
            layer.mlp.experts.down_proj[:, half:, :] = 0.0  # [experts, hidden, ffn]
        else:
            layer.mlp.down_proj.weight[half:, :] = 0.0
    model.model.norm.weight[half:] = gain
    sign = torch.tensor([1.0 if p else -1.0 for p in printable]).unsqueeze(1)
    model.lm_head.weight[:, half:] = sign.expand(-1, model.config.hidden_size - half).clone()


def convert(llama, folder, out):
    """llama.cpp's converter, run in this python; the BPE pre-tokenizer of
    the tiny test tokenizer (unknown to its hash table) is named `gpt-2`,
    whose splitting it uses."""
    code = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/gguf-py'];"
        "import convert_hf_to_gguf as c;"
        "from conversion import base;"
        "base.TextModel.get_vocab_base_pre = lambda self, tokenizer: 'gpt-2';"
        "sys.argv = ['convert_hf_to_gguf.py'] + sys.argv[2:]; c.main()"
    )
    done = subprocess.run([sys.executable, "-c", code, str(llama / "convert"), str(folder),
                           "--outfile", str(out), "--outtype", "f32"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"convert_hf_to_gguf.py failed on {folder}:\n{done.stderr[-3000:]}")


def prepared(name, cls, kwargs, kind, llama, use_cache):
    """The case's tiny model built, converted to f32 and quantized to each
    of its types (from the cache where an earlier run left them): the
    reference's ids of the texts, the transformers model, and the GGUF
    files by type."""
    h = hashlib.sha256()
    here = pathlib.Path(__file__).parent
    for part in [name, cls.__name__, repr(sorted(kwargs.items(), key=str)), kind,
                 transformers.__version__, torch.__version__, spm.__version__, llama.name,
                 (here / "compare_llama_cpp.py").read_text(), (here / "compare_transformers.py").read_text()]:
        h.update(part.encode() + b"\0")
    root = pathlib.Path(os.environ.get("VAUBAN_CACHE") or pathlib.Path.home() / ".cache/vauban")
    cached = root / "reference-models" / f"{name}-{h.hexdigest()[:16]}"
    # (llama.cpp expects Phi-3's own special tokens of a model whose name
    # says phi3; the folder's name becomes the GGUF's.)
    model_dir = name.replace("phi3", "fused")
    if not use_cache or not (cached / "done").is_file():
        # Built aside and moved into place whole: an interrupted run leaves
        # nothing a later one would take for done.
        staging = cached.with_name(f"{cached.name}.building-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        ids, _ = build(name, cls, kwargs, kind, staging / model_dir)
        convert(llama, staging / model_dir, staging / "f32.gguf")
        for kind_ in quant_types(name):
            quantize(llama, staging / "f32.gguf", staging / f"{kind_.lower()}.gguf", kind_)
        (staging / "ids.json").write_text(json.dumps(ids))
        (staging / "done").write_text("")
        shutil.rmtree(cached, ignore_errors=True)
        staging.rename(cached)
        # The case's entries that earlier versions of these scripts or of
        # llama.cpp built are never read again: a machine that keeps its
        # cache would otherwise gather one more set of files per change.
        for stale in cached.parent.glob(f"{name}-*"):
            if stale != cached and (stale / "done").is_file():
                shutil.rmtree(stale, ignore_errors=True)
    ids = json.loads((cached / "ids.json").read_text())
    model = transformers.AutoModelForCausalLM.from_pretrained(
        cached / model_dir, attn_implementation="eager").float().eval()
    files = {"F32": cached / "f32.gguf"}
    files.update({t: cached / f"{t.lower()}.gguf" for t in quant_types(name)})
    return ids, model, files


def from_gguf(llama, gguf):
    """transformers' Llama with an f32 llama GGUF's weights, configured by
    its metadata: llama.cpp's converter permutes the query and key rows of
    each head into halves for its RoPE, undone here (the inverse of the
    converter's `LlamaModel.permute`)."""
    if str(llama / "convert/gguf-py") not in sys.path:
        sys.path.insert(0, str(llama / "convert/gguf-py"))
    from gguf import GGUFReader
    reader = GGUFReader(str(gguf))
    meta = lambda key: reader.fields[key].contents()  # noqa: E731
    assert meta("general.architecture") == "llama", f"{gguf}: not a llama file"
    tensors = {t.name: torch.from_numpy(np.array(t.data, dtype=np.float32)) for t in reader.tensors}
    hidden, heads = meta("llama.embedding_length"), meta("llama.attention.head_count")
    kv_heads = meta("llama.attention.head_count_kv")
    config = transformers.LlamaConfig(
        vocab_size=tensors["token_embd.weight"].shape[0], hidden_size=hidden,
        intermediate_size=meta("llama.feed_forward_length"), num_hidden_layers=meta("llama.block_count"),
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hidden // heads,
        rms_norm_eps=meta("llama.attention.layer_norm_rms_epsilon"),
        max_position_embeddings=meta("llama.context_length"),
        tie_word_embeddings="output.weight" not in tensors, bos_token_id=meta("tokenizer.ggml.bos_token_id"),
        eos_token_id=meta("tokenizer.ggml.eos_token_id"), **ct.rope(meta("llama.rope.freq_base"), None))

    def unpermute(w, n):
        return w.reshape(n, w.shape[0] // n // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
             "ffn_norm": "post_attention_layernorm"}
    state = {"model.embed_tokens.weight": tensors.pop("token_embd.weight"),
             "model.norm.weight": tensors.pop("output_norm.weight")}
    if "output.weight" in tensors:
        state["lm_head.weight"] = tensors.pop("output.weight")
    for name, w in tensors.items():
        _, layer, part, _ = name.split(".")
        if part == "attn_q":
            w = unpermute(w, heads)
        elif part == "attn_k":
            w = unpermute(w, kv_heads)
        state[f"model.layers.{layer}.{names[part]}.weight"] = w
    model = transformers.LlamaForCausalLM(config).float().eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    if config.tie_word_embeddings:
        model.tie_weights()
    return model


def requantized(llama, source, tmp):
    """The trained model (`source`, any type llama-quantize reads)
    dequantized to F32, then each preset quantized from that F32 file:
    (type, path) pairs, each file deleted once the next is asked for, so
    that one preset at a time is on disk."""
    f32 = tmp / f"{REAL_CASE}.f32.gguf"
    done = subprocess.run([str(llama / "bin/llama-quantize"), "--allow-requantize", str(source),
                           str(f32), "F32"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"llama-quantize could not dequantize {source}:\n{done.stderr[-3000:]}")
    yield "F32", f32
    for preset in PRESETS:
        path = tmp / f"{REAL_CASE}.{preset.lower()}.gguf"
        quantize(llama, f32, path, preset)
        yield preset, path
        path.unlink()
    f32.unlink()


def quant_types(name):
    """The llama-quantize types (or presets) the case's f32 file is
    quantized to."""
    if name == WIDE_CASE:
        return list(PRESETS)
    return QUANT_TYPES + (FIVE_BIT if name in FIVE_BIT_CASES else [])


def tensor_types(llama, gguf):
    """How many tensors of each type the GGUF file holds, as llama.cpp's
    own `gguf` package (its converter's) reads them."""
    if str(llama / "convert/gguf-py") not in sys.path:
        sys.path.insert(0, str(llama / "convert/gguf-py"))
    from gguf import GGUFReader
    counts = {}
    for t in GGUFReader(str(gguf)).tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    return dict(sorted(counts.items()))


def quantize(llama, src, dst, kind):
    done = subprocess.run([str(llama / "bin/llama-quantize"), str(src), str(dst), kind],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"llama-quantize {kind} failed:\n{done.stderr[-3000:]}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        sys.exit(f"llama-server {path} answered {e.code}: {e.read().decode(errors='replace')[:2000]}")


@contextlib.contextmanager
def serving(llama, gguf, extra=()):
    """llama-server on `gguf` (with `extra` arguments), ready; its port."""
    port = free_port()
    server = subprocess.Popen([str(llama / "bin/llama-server"), "-m", str(gguf), "--port", str(port),
                               "-c", "256", "-t", "2", "--no-warmup",
                               # Keys and values as computed, as vauban's default cache keeps them.
                               "--cache-type-k", "f32", "--cache-type-v", "f32",
                               # Its CPU flash attention rounds (to ~2e-3 here).
                               "-fa", "off", *extra],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.time() > deadline:
                sys.exit(f"llama-server did not start on {gguf} {' '.join(map(str, extra))}:\n"
                         f"{server.stderr.read()[-3000:]}")
            time.sleep(0.2)
        yield port
    finally:
        server.kill()
        server.wait()


def llama_server(llama, gguf, vocab):
    """llama.cpp's prompt ids, greedy ids, their log-probabilities, by
    how much each beat the runner-up (its log-probability's margin), and
    each step's next-token distribution ({id: log-probability}, every one
    of the `vocab` tokens)."""
    with serving(llama, gguf) as port:
        every = [post(port, "/tokenize", {"content": t, "add_special": True})["tokens"]
                 for t in [TEXT] + HARD]
        # `n_probs` ranks the full distribution, before sampling.
        out = post(port, "/completion", {"prompt": every[0], "n_predict": 8, "temperature": 0.0,
                                         "n_probs": vocab, "cache_prompt": False,
                                         "samplers": ["top_k"], "top_k": 1})
        probs = out["completion_probabilities"]
        margins = [p["logprob"] - max(q["logprob"] for q in p["top_logprobs"] if q["id"] != p["id"])
                   for p in probs]
        dists = [{q["id"]: q["logprob"] for q in p["top_logprobs"]} for p in probs]
        return every, [p["id"] for p in probs], [p["logprob"] for p in probs], margins, dists


def vauban(binary, gguf, bundle, vocab, weights="native"):
    """vauban's prompt ids (TEXT's, then HARD's; TEXT's alone for weights
    other than the file's own), greedy ids after TEXT, their
    log-probabilities and each step's next-token distribution ({id:
    log-probability} over all `vocab` tokens, `--top-logprobs`), the file's
    weights multiplied as stored (`native`) or dequantized at load by
    vauban's reader (`f32`)."""
    role = lambda a, r: a.get("labels", {}).get("role") == r  # noqa: E731

    def traces(folder):
        manifest = json.loads((folder / "manifest.json").read_text())
        for entry in manifest["traces"]:
            trace = json.loads((folder / entry["file"]).read_text())
            tensors = load_file(str(folder / entry["tensors"]["file"])) if "tensors" in entry else {}
            yield trace["artifacts"], tensors

    ct.run([binary, "trace", "--model", str(gguf), "--weights", weights, "--prompt", TEXT, "--raw",
            "--logprobs", "--top-logprobs", str(vocab), "--raw-tensors", "--max-tokens", "8",
            "--out", str(bundle)])
    arts, tensors = next(traces(bundle))
    prompt = next(a["data"]["ids"] for a in arts if a["kind"] == "tokens" and role(a, "prompt"))
    greedy = next(a["data"]["ids"] for a in arts if a["kind"] == "tokens" and role(a, "completion"))
    logprobs = next(tensors[a["id"]] for a in arts if a["kind"] == "logprobs" and role(a, "completion"))
    top = next(tensors[a["id"]] for a in arts if a["kind"] == "logprobs" and role(a, "continuation"))
    top_ids = next(tensors[a["id"]] for a in arts
                   if a["kind"] == "tokens" and role(a, "continuation_top_k"))
    dists = [{int(i): float(v) for i, v in zip(ids, row)} for ids, row in zip(top_ids, top)]
    if weights != "native":
        return [prompt], greedy, [float(x) for x in logprobs], dists
    hard = bundle.with_suffix(".hard")
    prompts = [arg for t in HARD for arg in ("--prompt", t)]
    ct.run([binary, "trace", "--model", str(gguf), "--raw", "--max-tokens", "0", *prompts,
            "--out", str(hard)])
    ids = [prompt] + [next(a["data"]["ids"] for a in arts if a["kind"] == "tokens")
                      for arts, _ in traces(hard)]
    return ids, greedy, [float(x) for x in logprobs], dists


def distributions_apart(theirs, ours, truth, steps):
    """Over `steps` (each decoded from the same tokens on both sides): the
    largest KL(llama.cpp || vauban) in nats, over every token, and the
    largest |Δ logprob| on llama.cpp's TOP most likely tokens between
    vauban and llama.cpp, llama.cpp and the f32 model (`truth`), vauban and
    the f32 model."""
    kl, top, llama_truth, vauban_truth = 0.0, 0.0, 0.0, 0.0
    for p, q, t in zip(theirs[:steps], ours[:steps], truth[:steps]):
        assert p.keys() == q.keys(), f"distributions over different tokens: {len(p)} and {len(q)}"
        kl = max(kl, sum(np.exp(lp) * (lp - q[i]) for i, lp in p.items()))
        best = sorted(p, key=lambda i: -p[i])[:TOP]
        top = max(top, max(abs(p[i] - q[i]) for i in best))
        llama_truth = max(llama_truth, max(abs(p[i] - t[i]) for i in best))
        vauban_truth = max(vauban_truth, max(abs(q[i] - t[i]) for i in best))
    return kl, top, llama_truth, vauban_truth


def each_case(args, llama, only, tmp):
    """The cases compared, one at a time: each one's name, tokenizer kind
    (None: the file's own), the reference tokenizer's ids of the texts
    (None: llama.cpp's are the reference), the f32 model in transformers,
    and its (type, GGUF file) pairs."""
    if args.real:
        files = requantized(llama, pathlib.Path(args.real), tmp)
        first = next(files)  # the F32 file, which the reference is built from
        yield REAL_CASE, None, None, from_gguf(llama, first[1]), itertools.chain([first], files)
        return
    for name, (cls, kwargs, kind) in cases().items():
        if not only or name in only:
            ids, model, files = prepared(name, cls, kwargs, kind, llama, not args.no_cache)
            yield name, kind, ids, model, files.items()


def main():
    args = argparse.ArgumentParser()
    args.add_argument("vauban")
    args.add_argument("llama_cpp")
    args.add_argument("out")
    args.add_argument("--only", default="")
    args.add_argument("--no-cache", action="store_true", help="build every model afresh")
    args.add_argument("--real", metavar="GGUF",
                      help="SmolLM2-135M-Instruct's file: compare it in each preset instead")
    args = args.parse_args()
    binary, llama, out = args.vauban, pathlib.Path(args.llama_cpp), pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    transformers.logging.set_verbosity_error()
    only = [c for c in args.only.split(",") if c]
    results, failed = {}, False
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for name, kind, reference_ids, model, files in each_case(args, llama, only, tmp):
            vocab = model.config.vocab_size
            for dtype, gguf in files:
                # The types the file holds: each the preset names must be
                # there (llama-quantize did not fall back from it; on the
                # trained model's rows of 576 it does, see REAL_CASE).
                types = tensor_types(llama, gguf)
                expected = [] if name == REAL_CASE else PRESETS.get(dtype, [dtype])
                types_ok = all(t in types for t in expected)
                theirs = llama_server(llama, gguf, vocab)
                ours = vauban(binary, gguf, tmp / f"{name}.{dtype}.bundle", vocab)
                # Until either generates its end-of-sequence token.
                n = min(len(theirs[1]), len(ours[1]))
                parted = next((i for i in range(n) if theirs[1][i] != ours[1][i]), None)
                near_tie = (parted is not None and parted > 0 and dtype != "F32"
                            and theirs[3][parted] < NEAR_TIE)
                if near_tie:
                    n = parted
                same = theirs[1][:n] == ours[1][:n] and n > 0
                # The distributions over every step decoded from the same
                # tokens: up to the one where the greedy tokens parted.
                steps = n if parted is None else parted + 1
                # The f32 model's log-probabilities of llama.cpp's tokens.
                seq = theirs[0][0] + theirs[1][:max(n, steps - 1)]
                with torch.no_grad():
                    lp = torch.log_softmax(model(torch.tensor([seq])).logits[0], -1)
                start = len(theirs[0][0]) - 1
                truth = [lp[start + i, t].item() for i, t in enumerate(theirs[1][:n])]
                truth_dists = [dict(enumerate(lp[start + i].tolist())) for i in range(steps)]
                kl, top_diff, top_llama_truth, top_vauban_truth = distributions_apart(
                    theirs[4], ours[3], truth_dists, steps)
                top_ok = top_diff <= TOP_TOLERANCE or (
                    dtype != "F32"
                    and top_vauban_truth <= QUANT_ERROR_RATIO * top_llama_truth + QUANT_FLOOR)
                dists_ok = steps > 0 and kl <= KL_TOLERANCE and top_ok
                worst = lambda a, b: max(abs(x - y) for x, y in zip(a[:n], b[:n])) if n else float("inf")  # noqa: E731
                d_llama, d_truth, llama_truth = worst(ours[2], theirs[2]), worst(ours[2], truth), worst(theirs[2], truth)
                if dtype == "F32":
                    tolerance = REAL_F32_TOLERANCE if name == REAL_CASE else F32_TOLERANCE
                    close = d_llama < tolerance and d_truth < tolerance
                else:
                    close = d_truth <= QUANT_ERROR_RATIO * llama_truth + QUANT_FLOOR
                extra = {}
                if name == WIDE_CASE and dtype != "F32":
                    # A figure, not a verdict: the same file dequantized at
                    # load by vauban's reader (f32 products, no rounding of
                    # the activations), against llama.cpp and the f32 model.
                    deq = vauban(binary, gguf, tmp / f"{name}.{dtype}.f32.bundle", vocab, weights="f32")
                    if deq[1][:n] == theirs[1][:n]:
                        extra = {"greedy_vauban_f32_weights": deq[1],
                                 "max_abs_diff_vauban_f32_weights_llama_cpp": worst(deq[2], theirs[2]),
                                 "max_abs_diff_vauban_f32_weights_transformers": worst(deq[2], truth)}
                    else:
                        extra = {"greedy_vauban_f32_weights": deq[1]}
                # Every text's ids are llama.cpp's, and the tokenizer's the
                # model was built with (SentencePiece's own, or the BPE's;
                # a BOS id is the converter's choice, read from the GGUF).
                body = (lambda ids: [i[1:] for i in ids]) if kind == "spm" else (lambda ids: ids)
                tokens_ok = ours[0] == theirs[0] and (reference_ids is None
                                                      or body(ours[0]) == body(reference_ids))
                ok = tokens_ok and same and close and dists_ok and types_ok
                failed |= not ok
                results[f"{name}/{dtype}"] = {
                    "texts": [TEXT] + HARD,
                    "prompt_ids_vauban": ours[0], "prompt_ids_llama_cpp": theirs[0],
                    "prompt_ids_reference": reference_ids, "greedy_vauban": ours[1],
                    "greedy_llama_cpp": theirs[1], "logprobs_vauban": ours[2][:n],
                    "logprobs_llama_cpp": theirs[2][:n], "logprobs_transformers_f32": truth,
                    "max_abs_diff_vauban_llama_cpp": d_llama,
                    "max_abs_diff_vauban_transformers": d_truth,
                    "max_abs_diff_llama_cpp_transformers": llama_truth,
                    # How near a tie llama.cpp's closest greedy choice was.
                    "min_greedy_margin_llama_cpp": min(theirs[3][:n], default=None),
                    # The step where the greedy tokens parted at a near tie.
                    "near_tie_at": parted if near_tie else None,
                    # The next-token distributions, in full, over the steps
                    # decoded from the same tokens.
                    "distribution_steps": steps, "max_kl_llama_cpp_vauban": kl,
                    f"max_abs_diff_top{TOP}_logprobs": top_diff,
                    f"max_abs_diff_top{TOP}_llama_cpp_transformers": top_llama_truth,
                    f"max_abs_diff_top{TOP}_vauban_transformers": top_vauban_truth,
                    "tensor_types": types, "expected_types": expected, **extra, "ok": ok}
                held = " ".join(f"{t}×{c}" for t, c in types.items())
                print(f"{name:8} {dtype:6} ids {'same' if tokens_ok else 'DIFFERENT'}  "
                      f"greedy {'same' if same else 'DIFFERENT'} ({n}{', then a near tie' if near_tie else ''})  max|Δlogprob| vauban-llama.cpp "
                      f"{d_llama:.1e}, against the f32 model: vauban {d_truth:.1e}, llama.cpp {llama_truth:.1e}"
                      f"  KL {kl:.1e} top-{TOP} |Δ| {top_diff:.1e} (against the f32 model: vauban "
                      f"{top_vauban_truth:.1e}, llama.cpp {top_llama_truth:.1e}; {steps} steps)"
                      f"  types {held}{'' if types_ok else ' (NOT ' + ', '.join(expected) + ')'}"
                      f"  {'ok' if ok else 'FAIL'}", flush=True)
    meta = {"transformers": transformers.__version__, "text": TEXT, "f32_tolerance": F32_TOLERANCE,
            "quantized": {"error_ratio": QUANT_ERROR_RATIO, "floor": QUANT_FLOOR},
            "distributions": {"kl": KL_TOLERANCE, "top": TOP, "top_abs_diff": TOP_TOLERANCE},
            "models": results}
    (out / "compare_llama_cpp.json").write_text(json.dumps(meta, indent=2))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

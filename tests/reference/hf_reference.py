"""Independent NumPy (float64) re-statement of the Hugging Face decoder forward pass.

This module is the *oracle* that shardlm's C++ engine is checked against.  It is
written from the published semantics of the Hugging Face `transformers` models
(LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM) and
deliberately shares no code with the engine: it has its own safetensors reader,
its own rotary-embedding math and its own attention.  Everything is computed in
float64 on the weights exactly as stored (BF16/F16/F32 are widened losslessly),
so the only error left when comparing with the engine is the engine's own.

It is meant for tiny test models: `forward` recomputes the whole causal pass
with dense [T, T] attention and no KV cache, and `greedy` re-runs the full
forward at every step.  Clarity over speed.

Public API
----------
load_model(model_dir, round_weights_to_bf16=False) -> Model
forward(model, token_ids, skip_layers=False, sliding_window=USE_CONFIG,
        rope_scaling=USE_CONFIG) -> float64[T, vocab]
log_softmax(logits) -> float64[..., vocab]
score(model, ids) -> [None, s1, s2, ...]    s_i = log p(ids[i] | ids[:i])
greedy(model, prompt_ids, n) -> list of n token ids (argmax decoding)
read_safetensors(path) -> {name: float64 ndarray}, read_safetensors_dtypes(path)

Semantics restated (HF conventions)
-----------------------------------
* Linear layers: weight is [out_features, in_features]; y = x @ W.T (+ b).
  A bias is used whenever the checkpoint contains one (Qwen2 has q/k/v biases).
* RMSNorm: x / sqrt(mean(x^2) + eps) * w.
* Qwen3 additionally RMS-normalises every q and k head (over head_dim) with
  q_norm / k_norm *before* rotary.
* Rotary: "rotate half" layout: rotate_half(x) = cat(-x[d/2:], x[:d/2]);
  x' = x * cos + rotate_half(x) * sin, with cos/sin of
  position * cat(inv_freq, inv_freq), inv_freq = theta^(-arange(0, d, 2)/d).
  Optional rope_scaling of type "llama3" (HF `_compute_llama3_parameters`).
* Attention: causal, softmax scale 1/sqrt(head_dim), grouped-query attention
  (query head h reads kv head h // (num_heads / num_kv_heads)); optional sliding
  window: query at p sees keys at positions k with p - window < k <= p.
* MLP: down(silu(gate(x)) * up(x)).
* lm_head: `lm_head.weight`, or the embedding matrix when
  tie_word_embeddings is true.
"""

import json
import math
import os
import struct

import numpy as np

# Sentinel meaning "take this setting from config.json".
USE_CONFIG = object()

SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
)


# ---------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------

def _read_header(f):
    """Return (header dict, byte offset where the data section starts)."""
    raw_len = f.read(8)
    if len(raw_len) != 8:
        raise ValueError("file too short for a safetensors header")
    (header_len,) = struct.unpack("<Q", raw_len)
    header = json.loads(f.read(header_len).decode("utf-8"))
    return header, 8 + header_len


def read_safetensors_dtypes(path):
    """{tensor name: (dtype string, shape list)} without reading any data."""
    with open(path, "rb") as f:
        header, _ = _read_header(f)
    return {k: (v["dtype"], v["shape"]) for k, v in header.items() if k != "__metadata__"}


def _decode_tensor(buf, dtype, shape):
    """Decode raw little-endian bytes into a float64 array of `shape`."""
    if dtype == "F32":
        arr = np.frombuffer(buf, dtype="<f4").astype(np.float64)
    elif dtype == "F16":
        arr = np.frombuffer(buf, dtype="<f2").astype(np.float64)
    elif dtype == "BF16":
        # bfloat16 is the top half of an IEEE float32: shift it back up.
        bits = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
        arr = bits.view(np.float32).astype(np.float64)
    elif dtype == "F64":
        arr = np.frombuffer(buf, dtype="<f8").astype(np.float64)
    else:
        raise ValueError("unsupported safetensors dtype %r" % dtype)
    count = int(np.prod(shape)) if len(shape) else 1
    if arr.size != count:
        raise ValueError("tensor byte size does not match shape %r" % (shape,))
    return arr.reshape(shape)


_DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}


def read_safetensors(path):
    """Read every tensor of one .safetensors file as float64 ndarrays."""
    with open(path, "rb") as f:
        header, data_start = _read_header(f)
        f.seek(0, os.SEEK_END)
        file_size = f.tell()
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            dtype = info["dtype"]
            shape = info["shape"]
            if dtype not in _DTYPE_BYTES:
                raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, dtype))
            expected = _DTYPE_BYTES[dtype] * (int(np.prod(shape)) if shape else 1)
            if end - begin != expected:
                raise ValueError("%s: tensor %s: data_offsets span %d bytes, shape needs %d"
                                 % (path, name, end - begin, expected))
            if data_start + end > file_size:
                raise ValueError("%s: tensor %s extends past end of file" % (path, name))
            f.seek(data_start + begin)
            out[name] = _decode_tensor(f.read(end - begin), dtype, shape)
    return out


def round_to_bf16(x):
    """Round float values to the nearest bfloat16 (ties to even), as float64.

    This is how an f32 checkpoint becomes bf16 when an engine converts it, so
    the reference can model "f32 checkpoint, bf16 compute" on the same weights.
    """
    f = np.asarray(x, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounding_bias = ((bits >> 16) & 1) + 0x7FFF
    rounded = ((bits + rounding_bias) >> 16) << 16
    out = rounded.astype(np.uint32).view(np.float32).astype(np.float64)
    # NaN stays NaN (the bias trick could turn some NaNs into inf).
    return np.where(np.isnan(f), np.nan, out)


# ---------------------------------------------------------------------------
# model loading
# ---------------------------------------------------------------------------

class Model:
    """Config + float64 weights of one causal LM checkpoint."""

    def __init__(self, config, weights, weight_dtypes):
        self.config = config
        self.weights = weights              # name -> float64 ndarray
        self.weight_dtypes = weight_dtypes  # name -> safetensors dtype string
        self.arch = config["architectures"][0]
        if self.arch not in SUPPORTED_ARCHITECTURES:
            raise ValueError("unsupported architecture %r" % self.arch)
        act = config.get("hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise ValueError("unsupported hidden_act %r (only silu)" % act)

        self.hidden_size = int(config["hidden_size"])
        self.num_layers = int(config["num_hidden_layers"])
        self.num_heads = int(config["num_attention_heads"])
        self.num_kv_heads = int(config.get("num_key_value_heads") or self.num_heads)
        self.head_dim = int(config.get("head_dim") or self.hidden_size // self.num_heads)
        self.eps = float(config.get("rms_norm_eps", 1e-6))
        self.rope_theta = float(config.get("rope_theta", 10000.0))
        self.vocab_size = int(config["vocab_size"])
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")

        self.embed = weights["model.embed_tokens.weight"]
        if config.get("tie_word_embeddings", False):
            # HF ties lm_head to the embedding whenever the config says so.
            self.lm_head = self.embed
        elif "lm_head.weight" in weights:
            self.lm_head = weights["lm_head.weight"]
        else:
            raise ValueError("lm_head.weight missing and tie_word_embeddings is not true")

    def w(self, name):
        try:
            return self.weights[name]
        except KeyError:
            raise KeyError("checkpoint has no tensor %r" % name) from None

    def maybe(self, name):
        return self.weights.get(name)

    def default_sliding_window(self):
        """The sliding window HF would apply (None = full causal attention).

        Mistral uses config.sliding_window whenever it is a positive int.  Qwen2
        and Qwen3 only use it when `use_sliding_window` is true (and then only
        on layers >= max_window_layers); that is handled per layer in forward.
        """
        sw = self.config.get("sliding_window")
        if isinstance(sw, bool) or not isinstance(sw, int) or sw <= 0:
            return None
        return sw

    def layer_window(self, layer_idx, window):
        """The window for one layer, given the model-level window."""
        if window is None:
            return None
        if self.arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM"):
            if not self.config.get("use_sliding_window", False):
                return None
            if layer_idx < int(self.config.get("max_window_layers", 0) or 0):
                return None
        return window


def load_model(model_dir, round_weights_to_bf16=False):
    """Load config.json plus model.safetensors or a sharded checkpoint.

    With round_weights_to_bf16=True every weight is rounded to the nearest
    bfloat16 first (models an engine converting an f32 checkpoint to bf16).
    """
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)

    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    single_path = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(index_path):
        with open(index_path) as f:
            weight_map = json.load(f)["weight_map"]
        files = sorted(set(weight_map.values()))
    elif os.path.exists(single_path):
        weight_map = None
        files = ["model.safetensors"]
    else:
        raise FileNotFoundError("no model.safetensors or model.safetensors.index.json in %s"
                                % model_dir)

    weights, dtypes = {}, {}
    for fname in files:
        path = os.path.join(model_dir, fname)
        tensors = read_safetensors(path)
        for name, (dt, _shape) in read_safetensors_dtypes(path).items():
            dtypes[name] = dt
        for name, arr in tensors.items():
            if name in weights:
                raise ValueError("tensor %s appears in more than one shard" % name)
            if weight_map is not None and weight_map.get(name) != fname:
                raise ValueError("tensor %s is in %s but the index maps it to %r"
                                 % (name, fname, weight_map.get(name)))
            weights[name] = arr
    if weight_map is not None:
        missing = sorted(set(weight_map) - set(weights))
        if missing:
            raise ValueError("index lists tensors not found in shards: %s" % missing[:5])

    if round_weights_to_bf16:
        weights = {k: round_to_bf16(v) for k, v in weights.items()}
    return Model(config, weights, dtypes)


# ---------------------------------------------------------------------------
# building blocks
# ---------------------------------------------------------------------------

def rms_norm(x, weight, eps):
    """HF RMSNorm over the last axis."""
    variance = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(variance + eps) * weight


def linear(x, weight, bias=None):
    y = x @ weight.T
    if bias is not None:
        y = y + bias
    return y


def silu(x):
    return x / (1.0 + np.exp(-x))


def log_softmax(logits):
    """Numerically stable log-softmax over the last axis."""
    logits = np.asarray(logits, dtype=np.float64)
    m = np.max(logits, axis=-1, keepdims=True)
    z = logits - m
    return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))


def softmax(x):
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def rope_inv_freq(head_dim, theta, rope_scaling=None):
    """Rotary inverse frequencies, optionally with HF's "llama3" scaling.

    Default: inv_freq[i] = 1 / theta^(2i / head_dim), i = 0 .. head_dim/2 - 1.
    llama3: long wavelengths (> original_ctx / low_freq_factor) are divided by
    `factor`, short ones (< original_ctx / high_freq_factor) are kept, and the
    band in between is linearly interpolated in 1/wavelength space.
    """
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    if not rope_scaling:
        return inv_freq
    rope_type = rope_scaling.get("rope_type", rope_scaling.get("type"))
    if rope_type in (None, "default"):
        return inv_freq
    if rope_type != "llama3":
        raise ValueError("unsupported rope_scaling type %r" % rope_type)

    factor = float(rope_scaling["factor"])
    low_freq_factor = float(rope_scaling["low_freq_factor"])
    high_freq_factor = float(rope_scaling["high_freq_factor"])
    old_context_len = float(rope_scaling["original_max_position_embeddings"])

    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2.0 * math.pi / inv_freq

    # Low-frequency (long wavelength) components are slowed down by `factor`.
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    # Medium band: blend between scaled and unscaled.
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1.0 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return np.where(is_medium, smoothed, scaled)


def rotate_half(x):
    """HF rotate_half: cat(-x2, x1) where x1, x2 are the halves of the last axis."""
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x, positions, inv_freq):
    """x: [T, heads, head_dim]; positions: [T]."""
    freqs = np.outer(positions.astype(np.float64), inv_freq)   # [T, d/2]
    emb = np.concatenate([freqs, freqs], axis=-1)               # [T, d]
    cos = np.cos(emb)[:, None, :]
    sin = np.sin(emb)[:, None, :]
    return x * cos + rotate_half(x) * sin


def attention_mask(T, window):
    """Boolean [T, T]: True where query row p may attend to key column k."""
    p = np.arange(T)[:, None]
    k = np.arange(T)[None, :]
    allowed = k <= p
    if window is not None:
        allowed &= k > p - window
    return allowed


# ---------------------------------------------------------------------------
# forward pass
# ---------------------------------------------------------------------------

def _attention_block(model, i, h, positions, inv_freq, window):
    """Self-attention of decoder layer i on normalised hidden states h [T, H]."""
    pre = "model.layers.%d.self_attn." % i
    T = h.shape[0]
    nh, nkv, hd = model.num_heads, model.num_kv_heads, model.head_dim

    q = linear(h, model.w(pre + "q_proj.weight"), model.maybe(pre + "q_proj.bias"))
    k = linear(h, model.w(pre + "k_proj.weight"), model.maybe(pre + "k_proj.bias"))
    v = linear(h, model.w(pre + "v_proj.weight"), model.maybe(pre + "v_proj.bias"))
    q = q.reshape(T, nh, hd)
    k = k.reshape(T, nkv, hd)
    v = v.reshape(T, nkv, hd)

    # Qwen3: per-head RMSNorm of q and k, before rotary.
    q_norm = model.maybe(pre + "q_norm.weight")
    k_norm = model.maybe(pre + "k_norm.weight")
    if model.arch == "Qwen3ForCausalLM" and (q_norm is None or k_norm is None):
        raise KeyError("Qwen3 layer %d lacks q_norm/k_norm weights" % i)
    if q_norm is not None:
        q = rms_norm(q, q_norm, model.eps)
    if k_norm is not None:
        k = rms_norm(k, k_norm, model.eps)

    q = apply_rope(q, positions, inv_freq)
    k = apply_rope(k, positions, inv_freq)

    # Grouped-query attention: expand kv heads to query heads.
    group = nh // nkv
    k = np.repeat(k, group, axis=1)   # [T, nh, hd]; head j uses kv head j // group
    v = np.repeat(v, group, axis=1)

    scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)   # [nh, T, T]
    mask = attention_mask(T, window)
    scores = np.where(mask[None, :, :], scores, -np.inf)
    probs = softmax(scores)
    out = np.einsum("hqk,khd->qhd", probs, v).reshape(T, nh * hd)
    return linear(out, model.w(pre + "o_proj.weight"), model.maybe(pre + "o_proj.bias"))


def _mlp_block(model, i, h):
    pre = "model.layers.%d.mlp." % i
    gate = linear(h, model.w(pre + "gate_proj.weight"), model.maybe(pre + "gate_proj.bias"))
    up = linear(h, model.w(pre + "up_proj.weight"), model.maybe(pre + "up_proj.bias"))
    return linear(silu(gate) * up, model.w(pre + "down_proj.weight"),
                  model.maybe(pre + "down_proj.bias"))


def forward(model, token_ids, skip_layers=False, sliding_window=USE_CONFIG,
            rope_scaling=USE_CONFIG):
    """Full causal forward pass of one sequence; returns float64 logits [T, vocab].

    skip_layers=True drops every decoder layer (embed -> final norm -> lm_head),
    which is used to show that a test model's blocks actually matter.
    sliding_window / rope_scaling override the config (None disables them);
    used only to measure how much a test depends on those features.
    """
    ids = np.asarray(list(token_ids), dtype=np.int64)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError("forward needs a non-empty 1-D list of token ids")
    if ids.min() < 0 or ids.max() >= model.embed.shape[0]:
        raise ValueError("token id out of range [0, %d)" % model.embed.shape[0])

    T = ids.size
    positions = np.arange(T)
    if rope_scaling is USE_CONFIG:
        rope_scaling = model.config.get("rope_scaling")
    if sliding_window is USE_CONFIG:
        sliding_window = model.default_sliding_window()
    inv_freq = rope_inv_freq(model.head_dim, model.rope_theta, rope_scaling)

    x = model.embed[ids]                                        # [T, H]
    if not skip_layers:
        for i in range(model.num_layers):
            pre = "model.layers.%d." % i
            h = rms_norm(x, model.w(pre + "input_layernorm.weight"), model.eps)
            x = x + _attention_block(model, i, h, positions, inv_freq,
                                     model.layer_window(i, sliding_window))
            h = rms_norm(x, model.w(pre + "post_attention_layernorm.weight"), model.eps)
            x = x + _mlp_block(model, i, h)
    x = rms_norm(x, model.w("model.norm.weight"), model.eps)
    return x @ model.lm_head.T


def score(model, ids, **forward_kwargs):
    """[None, s1, ..., s_{T-1}] with s_i = log p(ids[i] | ids[:i])."""
    ids = list(ids)
    lp = log_softmax(forward(model, ids, **forward_kwargs))
    return [None] + [float(lp[i - 1, ids[i]]) for i in range(1, len(ids))]


def greedy(model, prompt_ids, n, **forward_kwargs):
    """Argmax decoding of n new tokens (full recompute each step, no EOS stop).

    Ties are broken towards the lowest token id (numpy argmax).
    """
    seq = list(prompt_ids)
    out = []
    for _ in range(n):
        logits = forward(model, seq, **forward_kwargs)[-1]
        nxt = int(np.argmax(logits))
        out.append(nxt)
        seq.append(nxt)
    return out


def greedy_with_logprobs(model, prompt_ids, n, **forward_kwargs):
    """Like greedy, but also returns log p of each chosen token and the
    margin (top1 - top2 log-prob) at each step, useful to diagnose near-ties."""
    seq = list(prompt_ids)
    toks, lps, margins = [], [], []
    for _ in range(n):
        lp = log_softmax(forward(model, seq, **forward_kwargs)[-1])
        order = np.argsort(-lp, kind="stable")
        nxt = int(order[0])
        toks.append(nxt)
        lps.append(float(lp[nxt]))
        margins.append(float(lp[order[0]] - lp[order[1]]) if lp.size > 1 else float("inf"))
        seq.append(nxt)
    return toks, lps, margins


if __name__ == "__main__":
    # Tiny CLI for manual poking: hf_reference.py MODEL_DIR 1,2,3 [N]
    import sys
    if len(sys.argv) < 3:
        print("usage: hf_reference.py MODEL_DIR IDS(comma separated) [N_GREEDY]", file=sys.stderr)
        sys.exit(2)
    m = load_model(sys.argv[1])
    prompt = [int(t) for t in sys.argv[2].split(",") if t]
    result = {"token_ids": prompt, "scores": score(m, prompt)}
    if len(sys.argv) > 3:
        toks, lps, _ = greedy_with_logprobs(m, prompt, int(sys.argv[3]))
        result["greedy_token_ids"] = toks
        result["greedy_logprobs"] = lps
    print(json.dumps(result))

#!/usr/bin/env python3
"""Random-weight Gemma 2 / Gemma 4 checkpoints + transformers float32 references, for features the
trained fixtures (shared/models/tiny-*) do not exercise. Same pattern as
tests/fixtures/gen_gemma3_random.py: build a small model with random weights, save it in bf16, rewrite
config.json into the layout under test (the Hub's), reload it with transformers in float32 / eager
attention / TF32 off, and record logits and greedy ids.

Run on the GPU machine (transformers 5.17, torch):
    python3 tools/gen_random_references.py OUT_DIR [--only NAME[,NAME...]] [--no-embed-scale]
Writes OUT_DIR/<name>/{config.json (rewritten), model.safetensors or shards + index, reference.json}
and OUT_DIR/embed_scale_reference.json.

Models (all: vocab 512, hidden 320 so sqrt(H) is not exact, sliding window 16, 80-token input):
  gemma2-random          Gemma2ForCausalLM; query_pre_attn_scalar 96 != head_dim 48; attention soft-cap
                         50 and final soft-cap 30 (logits large enough that both matter); legacy flat
                         `rope_theta`; no `layer_types` (even layers sliding); 5 layers; GQA 4/2.
  gemma4-random-flat     Gemma4ForCausalLM with the Hub's flat keys (`global_head_dim` 128 != head_dim
                         48, no per_layer_config, `num_global_key_value_heads` 1 that must be IGNORED
                         because attention_k_eq_v is false); PLE (32); KV sharing (last 2 of 7 layers,
                         a sliding and a full consumer, two full layers before them); double-wide MLP;
                         proportional RoPE (0.25) on full layers; final soft-cap 30; layer_scalar != 1.
  gemma4-random-moe-kv   MoE (8 experts, top-2, moe_intermediate_size 32) + attention_k_eq_v with
                         num_global_key_value_heads 2 != num_key_value_heads 4 (flat keys); no PLE;
                         saved as sharded safetensors (>= 3 shards + model.safetensors.index.json).
  gemma4-random-wrapper  Gemma4ForConditionalGeneration (model_type gemma4, text under text_config,
                         tensors under model.language_model.) with a tiny real vision tower and audio
                         tower (model.vision_tower.*, model.embed_vision.*, model.audio_tower.*, ...);
                         the reference is the wrapper's own text-only forward.

Weights (deterministic per seed): see INIT below. The tied LM head makes a token predict itself when
its own embedding dominates the residual stream (that is why the Gemma 3 example repeats one id), so
embeddings are small relative to the layer outputs (Gemma 4: layer_scalar < 1 also shrinks them) and
the final norm weight is large so that the logits still reach the soft-cap range. Attention is kept
moderately sharp so that float32 rounding noise stays well below a 1e-3 test tolerance (see INIT). A
seed is rejected, and the next one tried, unless its greedy ids are varied, every greedy step has a
clear top-1/top-2 gap, and the CPU and GPU float32 forwards agree (see MIN_MARGIN, MAX_CPU_GPU_DIFF).
"""
import argparse
import collections
import copy
import json
import os
import re
import shutil
import sys
import tempfile
import traceback

import torch
import transformers
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    Gemma4Config,
    Gemma4ForCausalLM,
    Gemma4ForConditionalGeneration,
    Gemma4TextConfig,
)

S, F = "sliding_attention", "full_attention"
POSITIONS = [0, 15, 16, 17, 40, 79]
N_GREEDY = 20
ROPE4 = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
}

# ------------------------------------------------------------------------------------------------
# The config.json files as written (Hub layout). "optional_extras" are keys that real Hub files carry
# but that play no part in the math; if transformers refused them they would be dropped (and logged).
# ------------------------------------------------------------------------------------------------

GEMMA2 = {
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "vocab_size": 512,
    "hidden_size": 320,
    "intermediate_size": 384,
    "num_hidden_layers": 5,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 48,
    "query_pre_attn_scalar": 96,
    "sliding_window": 16,
    "rope_theta": 10000.0,
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-06,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_act": "gelu_pytorch_tanh",
    "initializer_range": 0.02,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "tie_word_embeddings": True,
    "use_cache": True,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "pad_token_id": 0,
    "cache_implementation": "hybrid",
    "torch_dtype": "bfloat16",
}

GEMMA4_FLAT_TEXT = {
    "model_type": "gemma4_text",
    "vocab_size": 512,
    "hidden_size": 320,
    "intermediate_size": 192,
    "num_hidden_layers": 7,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 48,
    "global_head_dim": 128,
    "num_global_key_value_heads": 1,
    "attention_k_eq_v": False,
    "sliding_window": 16,
    "layer_types": [S, F, S, F, S, S, F],
    "rope_parameters": ROPE4,
    "hidden_size_per_layer_input": 32,
    "vocab_size_per_layer_input": 512,
    "num_kv_shared_layers": 2,
    "use_double_wide_mlp": True,
    "enable_moe_block": False,
    "num_experts": None,
    "top_k_experts": None,
    "moe_intermediate_size": None,
    "final_logit_softcapping": 30.0,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-06,
    "hidden_activation": "gelu_pytorch_tanh",
    "initializer_range": 0.02,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "use_bidirectional_attention": None,
    "tie_word_embeddings": True,
    "use_cache": True,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "pad_token_id": 0,
}

GEMMA4_MOE_TEXT = dict(GEMMA4_FLAT_TEXT)
GEMMA4_MOE_TEXT.update({
    "intermediate_size": 128,
    "num_hidden_layers": 5,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 40,
    "global_head_dim": 64,
    "num_global_key_value_heads": 2,
    "attention_k_eq_v": True,
    "layer_types": [S, F, S, S, F],
    "hidden_size_per_layer_input": 0,
    "num_kv_shared_layers": 0,
    "use_double_wide_mlp": False,
    "enable_moe_block": True,
    "num_experts": 8,
    "top_k_experts": 2,
    "moe_intermediate_size": 32,
})

GEMMA4_WRAPPER_TEXT = dict(GEMMA4_FLAT_TEXT)
GEMMA4_WRAPPER_TEXT.update({
    "num_hidden_layers": 5,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "global_head_dim": 128,
    "num_global_key_value_heads": None,
    "layer_types": [S, S, F, S, F],
    "num_kv_shared_layers": 1,
    "use_double_wide_mlp": False,
})

TINY_VISION = {
    "model_type": "gemma4_vision",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "patch_size": 16,
    "pooling_kernel_size": 3,
    "position_embedding_size": 64,
    "rms_norm_eps": 1e-06,
}

TINY_AUDIO = {
    "model_type": "gemma4_audio",
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "subsampling_conv_channels": [8, 4],
    "output_proj_dims": 32,
    "rms_norm_eps": 1e-06,
}

WRAPPER_TOP = {
    "architectures": ["Gemma4ForConditionalGeneration"],
    "model_type": "gemma4",
    "boi_token_id": 255999,
    "eoi_token_id": 258882,
    "image_token_id": 258880,
    "video_token_id": 258884,
    "boa_token_id": 256000,
    "eoa_token_index": 258883,
    "audio_token_id": 258881,
    "initializer_range": 0.02,
    "tie_word_embeddings": True,
}

# Random init (std of N(0, std) unless noted). Gemma 2 norms are "Gemma offset" (1 + w): w ~ N(0, 0.3);
# Gemma 4 norms are plain scale w: 1 + N(0, 0.3). final_norm_add is added to the final norm weight only
# (logit scale, see the docstring). Gemma 4 q_norm/k_norm weights are qk_norm_scale * (1 + N(0, 0.3)):
# Gemma 4 attention has scaling 1.0 on RMS-normed q and k, so with unit norm weights the scores reach ~50,
# the softmax is nearly one-hot and float32 rounding noise grows to ~1e-3 in the logits (measured against a
# float64 forward), too close to a 1e-3 test tolerance. For the same reason the Gemma 2 q/k projections are
# kept at std 0.1 (scores up to ~12 before the cap of 50; the cap still moves gemma2-random's logits by 0.14).
INIT_G2 = {"emb": 0.01, "qk": 0.1, "lin": 0.06, "norm": 0.3, "final_norm_add": 20.0}
INIT_G4 = {"emb": 0.05, "qk": 0.06, "lin": 0.06, "norm": 0.3, "final_norm_add": 3.0, "qk_norm_scale": 0.35,
           "layer_scalar": [0.4, 0.8], "router": 1.5, "per_expert_scale": [0.5, 1.5], "ple_emb": 0.05}
INIT_G4_MOE = dict(INIT_G4, qk_norm_scale=0.45)
INIT_G4_WRAPPER = dict(INIT_G4, qk_norm_scale=0.4)
# A seed is accepted when its greedy ids are varied, every greedy step's top-1/top-2 logit gap is at least
# MIN_MARGIN, and the float32 logits of the same checkpoint computed on the CPU (other kernels, other
# summation order) agree with the GPU reference to MAX_CPU_GPU_DIFF.
MIN_MARGIN = 2e-3
MAX_CPU_GPU_DIFF = 1.5e-4
N_SEEDS = 16

MODELS = [
    {"name": "gemma2-random", "family": "gemma2", "hub": GEMMA2, "init": INIT_G2, "seed": 2000,
     "optional_extras": ["hidden_act", "cache_implementation", "torch_dtype"]},
    {"name": "gemma4-random-flat", "family": "gemma4",
     "hub": dict(GEMMA4_FLAT_TEXT, architectures=["Gemma4ForCausalLM"]), "init": INIT_G4, "seed": 4000},
    {"name": "gemma4-random-moe-kv", "family": "gemma4",
     "hub": dict(GEMMA4_MOE_TEXT, architectures=["Gemma4ForCausalLM"]), "init": INIT_G4_MOE, "seed": 4100,
     "max_shard_size": "2MB", "min_shards": 3},
    {"name": "gemma4-random-wrapper", "family": "gemma4", "wrapper": True, "init": INIT_G4_WRAPPER, "seed": 4200,
     "hub": dict(WRAPPER_TOP, text_config=GEMMA4_WRAPPER_TEXT, vision_config=TINY_VISION,
                 audio_config=TINY_AUDIO, eos_token_id=[1, 106]),
     "optional_extras": ["eos_token_id"]},
]


def log(*a):
    print(*a, flush=True)


def strip_keys(d, keys):
    return {k: v for k, v in d.items() if k not in keys}


# ------------------------------------------------------------------------------------------------
# building
# ------------------------------------------------------------------------------------------------


def build_config(spec, hub):
    hub = strip_keys(hub, spec.get("optional_extras", ()))
    if spec["family"] == "gemma2":
        return Gemma2Config(**strip_keys(hub, ("architectures", "model_type")))
    if not spec.get("wrapper"):
        return Gemma4TextConfig(**strip_keys(hub, ("architectures", "model_type")))
    kw = strip_keys(hub, ("architectures", "model_type", "text_config", "vision_config", "audio_config"))
    text = Gemma4TextConfig(**strip_keys(hub["text_config"], ("model_type",)))
    vis = hub.get("vision_config")
    aud = hub.get("audio_config")
    return Gemma4Config(text_config=text,
                        vision_config=strip_keys(vis, ("model_type",)) if vis else None,
                        audio_config=strip_keys(aud, ("model_type",)) if aud else None, **kw)


def model_class(spec):
    if spec["family"] == "gemma2":
        return Gemma2ForCausalLM
    return Gemma4ForConditionalGeneration if spec.get("wrapper") else Gemma4ForCausalLM


def randomize(model, spec, seed):
    """Deterministic random weights for the language model (wrapper: towers keep their own init)."""
    P, fam = spec["init"], spec["family"]
    g = torch.Generator().manual_seed(seed)

    def normal(t, std, mean=0.0):
        t.copy_(torch.randn(t.shape, generator=g) * std + mean)

    def uniform(t, lo, hi):
        t.copy_(torch.rand(t.shape, generator=g) * (hi - lo) + lo)

    lm_prefix = "model.language_model." if spec.get("wrapper") else "model."
    done = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.startswith(lm_prefix):
                continue
            short = name[len(lm_prefix):]
            if short == "embed_tokens.weight":
                normal(p, P["emb"])
            elif short == "embed_tokens_per_layer.weight":
                normal(p, P["ple_emb"])
            elif short.endswith("router.proj.weight"):
                normal(p, P["router"])
            elif short.endswith("router.scale"):
                normal(p, P["norm"], 1.0)
            elif short.endswith("router.per_expert_scale"):
                uniform(p, *P["per_expert_scale"])
            elif fam == "gemma4" and short.endswith(("q_norm.weight", "k_norm.weight")):
                normal(p, P["norm"] * P["qk_norm_scale"], P["qk_norm_scale"])
            elif re.search(r"norm(_\d+)?\.weight$", short):  # incl. pre/post_feedforward_layernorm_1/_2
                mean = 0.0 if fam == "gemma2" else 1.0
                if short == "norm.weight":
                    mean += P["final_norm_add"]
                normal(p, P["norm"], mean)
            elif short.endswith(("q_proj.weight", "k_proj.weight")):
                normal(p, P["qk"])
            else:
                if "norm" in short or "scale" in short:
                    raise RuntimeError(f"randomize: no rule for {name}")
                normal(p, P["lin"])
            done.append(short)
        for name, b in model.named_buffers():
            if name.startswith(lm_prefix) and name.endswith("layer_scalar"):
                uniform(b, *P["layer_scalar"])
                done.append(name[len(lm_prefix):])
    return done


def write_hub_config(out, hub):
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hub, f, indent=2)
        f.write("\n")


def load_reference_model(spec, out, hub):
    """from_pretrained on the rewritten config; drops OPTIONAL_EXTRAS if transformers refuses them."""
    cls = model_class(spec)
    dropped = []
    try:
        m, info = cls.from_pretrained(out, dtype=torch.float32, attn_implementation="eager",
                                      output_loading_info=True)
    except Exception:
        extras = spec.get("optional_extras", [])
        if not extras:
            raise
        log("!! from_pretrained refused the Hub config; retrying without", extras)
        traceback.print_exc()
        dropped = [k for k in extras if k in hub]
        hub = strip_keys(hub, extras)
        write_hub_config(out, hub)
        m, info = cls.from_pretrained(out, dtype=torch.float32, attn_implementation="eager",
                                      output_loading_info=True)
    info = {k: sorted(str(x) for x in v) if isinstance(v, (list, set, tuple)) else str(v) for k, v in info.items()}
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if bad:
        missing = [k for k in bad.get("missing_keys", []) if not k.endswith("lm_head.weight")]
        if missing or bad.get("unexpected_keys") or bad.get("mismatched_keys"):
            raise RuntimeError(f"loading the saved checkpoint through the rewritten config was not clean: {bad}")
    return m.cuda().eval(), info, hub, dropped


def text_model(m):
    """The decoder (Gemma*TextModel / Gemma2Model) inside any of the classes used here."""
    inner = m.model
    return inner.language_model if hasattr(inner, "language_model") else inner


def describe_layers(m):
    tm = text_model(m)
    cfg = tm.config
    out = []
    for i, layer in enumerate(tm.layers):
        a = layer.self_attn
        nh = cfg.num_attention_heads
        d = a.q_proj.weight.shape[0] // nh
        k = getattr(a, "k_proj", None)
        v = getattr(a, "v_proj", None)
        e = {"layer": i, "type": cfg.layer_types[i], "head_dim": d,
             "kv_heads": (k.weight.shape[0] // d) if k is not None else None,
             "has_k_proj": k is not None, "has_v_proj": v is not None,
             "scaling": float(getattr(a, "scaling", float("nan"))),
             "sliding_window": getattr(a, "sliding_window", None),
             "is_kv_shared_layer": bool(getattr(a, "is_kv_shared_layer", False)),
             "mlp_intermediate": layer.mlp.gate_proj.weight.shape[0]}
        if hasattr(layer, "layer_scalar"):
            e["layer_scalar"] = float(layer.layer_scalar.float().item())
        if hasattr(a, "attn_logit_softcapping"):
            e["attn_logit_softcapping"] = a.attn_logit_softcapping
        out.append(e)
    rot = getattr(tm, "rotary_emb", None)
    rope = {}
    if rot is not None:
        for name, b in rot.named_buffers():
            if name.endswith("inv_freq") and "original" not in name:
                rope[name] = {"len": int(b.numel()), "nonzero": int((b != 0).sum().item())}
    return out, rope


@torch.no_grad()
def run_reference(m, ids):
    logits = m(ids.cuda()).logits[0].float().cpu()
    seq = ids.clone()
    greedy, step_max, margin = [], [], []
    for s in range(N_GREEDY):
        last = logits[-1] if s == 0 else m(seq.cuda()).logits[0, -1].float().cpu()
        top2 = torch.topk(last, 2)
        nxt = int(last.argmax())
        greedy.append(nxt)
        step_max.append(float(top2.values[0]))
        margin.append(float(top2.values[0] - top2.values[1]))
        seq = torch.cat([seq, torch.tensor([[nxt]])], dim=1)
    return logits, greedy, step_max, margin


def varied(greedy):
    c = collections.Counter(greedy)
    return len(c) >= 10 and c.most_common(1)[0][1] <= 4


def hf_generate(m, ids):
    try:
        gc = copy.deepcopy(m.generation_config)
        gc.eos_token_id = None
        gc.pad_token_id = 0
        gc.do_sample = False
        gc.max_new_tokens = N_GREEDY
        out = m.generate(ids.cuda(), attention_mask=torch.ones_like(ids).cuda(), generation_config=gc)
        return out[0, ids.shape[1]:].tolist(), None
    except Exception as e:  # informational only
        return None, f"{type(e).__name__}: {e}"


# ------------------------------------------------------------------------------------------------
# one model
# ------------------------------------------------------------------------------------------------


def make_one(spec, out_root, ids):
    name = spec["name"]
    out = os.path.join(out_root, name)
    hub = json.loads(json.dumps(spec["hub"]))
    notes = []
    if spec.get("wrapper"):
        # Prefer real vision + audio towers; fall back to vision only if the tiny audio config fails.
        for drop in ((), ("audio_config",)):
            h = {k: v for k, v in hub.items() if k not in drop}
            try:
                cfg = build_config(spec, h)
                model_class(spec)(cfg)
                hub = h
                if drop:
                    notes.append("audio tower could not be built with the tiny config; vision tower only")
                break
            except Exception:
                traceback.print_exc()
        else:
            raise RuntimeError("could not build the wrapper")

    def attempt(seed):
        torch.manual_seed(seed)  # the wrapper's towers keep transformers' own (global-RNG) init
        if os.path.isdir(out):
            shutil.rmtree(out)
        os.makedirs(out)
        cfg = build_config(spec, hub)
        model = model_class(spec)(cfg)
        model.eval()
        randomize(model, spec, seed)
        model = model.to(torch.bfloat16)
        kw = {"max_shard_size": spec["max_shard_size"]} if spec.get("max_shard_size") else {}
        model.save_pretrained(out, **kw)
        n_shards = len([f for f in os.listdir(out) if f.endswith(".safetensors")])
        if spec.get("min_shards") and n_shards < spec["min_shards"]:
            log(f"[{name}] only {n_shards} shards with {kw}; saving again with max_shard_size=1MB")
            for f in os.listdir(out):
                os.remove(os.path.join(out, f))
            model.save_pretrained(out, max_shard_size="1MB")
        del model
        for f in ("generation_config.json",):
            if os.path.exists(os.path.join(out, f)):
                os.remove(os.path.join(out, f))
        saved_cfg = json.load(open(os.path.join(out, "config.json")))
        write_hub_config(out, hub)
        ref_model, info, hub_used, dropped = load_reference_model(spec, out, hub)
        logits, greedy, step_max, margin = run_reference(ref_model, ids)
        cpu_model = model_class(spec).from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
        with torch.no_grad():
            d_cpu = float((cpu_model(ids).logits[0].float() - logits)[POSITIONS].abs().max())
        del cpu_model
        c = collections.Counter(greedy)
        r = dict(seed=seed, ref_model=ref_model, info=info, dropped=dropped, saved_cfg=saved_cfg, logits=logits,
                 greedy=greedy, step_max=step_max, margin=margin, d_cpu=d_cpu,
                 score=(len(c), -c.most_common(1)[0][1]))
        log(f"[{name}] seed {seed}: greedy {greedy} distinct/maxrepeat {r['score']} min margin {min(margin):.4g} "
            f"cpu-vs-gpu {d_cpu:.3g}")
        why = []
        if not varied(greedy):
            why.append(f"greedy ids not varied {greedy}")
        if min(margin) < MIN_MARGIN:
            why.append(f"greedy top-2 margin {min(margin):.3g} < {MIN_MARGIN}")
        if d_cpu > MAX_CPU_GPU_DIFF:
            why.append(f"cpu-vs-gpu float32 logits differ by {d_cpu:.3g} > {MAX_CPU_GPU_DIFF}")
        r["why"] = why
        return r

    # Take the first seed with clearly varied greedy ids; otherwise the best acceptable one of N_SEEDS.
    best = None
    for k in range(N_SEEDS):
        r = attempt(spec["seed"] + k)
        if r["why"]:
            notes.append(f"seed {r['seed']} rejected: " + "; ".join(r["why"]))
        elif best is None or r["score"] > best["score"]:
            best = r
        if best is r and r["score"][0] >= 15 and -r["score"][1] <= 3:
            break
        if best is not r:
            del r["ref_model"]
            torch.cuda.empty_cache()
    if best is None:
        raise RuntimeError(f"{name}: no seed was accepted: {notes}")
    if best is not r:  # rebuild the chosen seed (the folder holds the last one tried)
        notes.append(f"seed {best['seed']} chosen among {k + 1} (best distinct/max-repeat {best['score']})")
        del best["ref_model"]
        best = attempt(best["seed"])
    seed, ref_model, info, dropped, saved_cfg = (best[x] for x in ("seed", "ref_model", "info", "dropped", "saved_cfg"))
    logits, greedy, step_max, margin, d_cpu = (best[x] for x in ("logits", "greedy", "step_max", "margin", "d_cpu"))

    files = sorted(os.listdir(out))
    shards = [f for f in files if f.endswith(".safetensors")]
    if spec.get("min_shards") and len(shards) < spec["min_shards"]:
        raise RuntimeError(f"{name}: only {len(shards)} shards: {files}")

    # Sanity: the same weights through transformers' own saved config give the same logits.
    chk = tempfile.mkdtemp()
    for f in files:
        if f != "config.json":
            os.symlink(os.path.join(os.path.abspath(out), f), os.path.join(chk, f))
    with open(os.path.join(chk, "config.json"), "w") as f:
        json.dump(saved_cfg, f)
    m2 = model_class(spec).from_pretrained(chk, dtype=torch.float32, attn_implementation="eager").cuda().eval()
    with torch.no_grad():
        d_saved = float((m2(ids.cuda()).logits[0].float().cpu() - logits).abs().max())
    del m2
    shutil.rmtree(chk)

    extra = {"tensor_prefixes": sorted(set().union(*[_safetensors_prefixes(os.path.join(out, f)) for f in shards]))}
    if spec.get("wrapper"):
        # The text model alone (Gemma4ForCausalLM with the text config, same weights) must agree.
        try:
            tcfg = copy.deepcopy(ref_model.config.get_text_config())
            tm = Gemma4ForCausalLM(tcfg).to(torch.float32)
            try:
                tm.set_attn_implementation("eager")
            except Exception:
                traceback.print_exc()
            sd = {"model." + k: v for k, v in text_model(ref_model).state_dict().items()}
            missing, unexpected = tm.load_state_dict(sd, strict=False)
            try:
                tm.tie_weights()
            except Exception:
                traceback.print_exc()
            tm = tm.cuda().eval()
            with torch.no_grad():
                d_text = float((tm(ids.cuda()).logits[0].float().cpu() - logits).abs().max())
            extra["text_only_model_max_abs_diff"] = d_text
            extra["text_only_model_attn"] = str(getattr(tm.config, "_attn_implementation", None))
            extra["text_only_model_missing_keys"] = list(missing)
            extra["text_only_model_unexpected_keys"] = list(unexpected)
            del tm
        except Exception as e:
            traceback.print_exc()
            extra["text_only_model_error"] = f"{type(e).__name__}: {e}"

    gen_ids, gen_err = hf_generate(ref_model, ids)
    layers, rope = describe_layers(ref_model)
    ref = {
        "computed_with": {"transformers": transformers.__version__, "torch": torch.__version__,
                          "dtype": "float32 (bf16 weights upcast)", "attn_implementation": "eager", "tf32": False,
                          "device": torch.cuda.get_device_name(0), "script": "tools/gen_random_references.py"},
        "model_class": type(ref_model).__name__,
        "seed": seed,
        "init": spec["init"],
        "input_ids": ids[0].tolist(),
        "positions_checked": POSITIONS,
        "logits": {str(p): logits[p].tolist() for p in POSITIONS},
        "greedy_new_ids": greedy,
        "greedy_step_max_logit": step_max,
        "greedy_step_top2_margin": margin,
        "hf_generate_cache_ids": gen_ids,
        "hf_generate_cache_matches": gen_ids == greedy if gen_ids is not None else None,
        "hf_generate_error": gen_err,
        "max_abs_diff_with_transformers_saved_config": d_saved,
        "max_abs_diff_cpu_vs_gpu_float32": d_cpu,
        "layers_as_loaded": layers,
        "rope_inv_freq_as_loaded": rope,
        "loading_info": info,
        "hub_config_keys_dropped": dropped,
        "notes": notes,
        "files": files,
        "config_as_saved_by_transformers": saved_cfg,
    }
    ref.update(extra)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f)
    summary = {k: ref[k] for k in ("model_class", "seed", "greedy_new_ids", "hf_generate_cache_matches",
                                   "max_abs_diff_with_transformers_saved_config", "max_abs_diff_cpu_vs_gpu_float32",
                                   "files", "notes",
                                   "hub_config_keys_dropped")}
    summary.update(extra)
    summary["min_greedy_margin"] = min(margin)
    summary["max_abs_logit_checked"] = float(max(abs(v) for p in POSITIONS for v in logits[p].tolist()))
    summary["layers"] = layers
    summary["rope"] = rope
    log(f"[{name}] " + json.dumps(summary))
    del ref_model
    torch.cuda.empty_cache()


def _safetensors_prefixes(path):
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    return sorted({".".join(k.split(".")[:2]) for k in h if k != "__metadata__"})


# ------------------------------------------------------------------------------------------------
# embed_scale table (spec section 0.5)
# ------------------------------------------------------------------------------------------------

EMBED_SIZES = [320, 640, 1152, 1536, 2304, 2560, 2816, 5376]


def tiny_family(fam, H):
    common = dict(vocab_size=4, hidden_size=H, intermediate_size=8, num_hidden_layers=1, num_attention_heads=1,
                  num_key_value_heads=1, head_dim=8)
    if fam == "gemma2":
        return Gemma2ForCausalLM(Gemma2Config(query_pre_attn_scalar=8, **common))
    if fam == "gemma3":
        return Gemma3ForCausalLM(Gemma3TextConfig(query_pre_attn_scalar=8, **common))
    return Gemma4ForCausalLM(Gemma4TextConfig(global_head_dim=8, hidden_size_per_layer_input=0,
                                              layer_types=[F], **common))


@torch.no_grad()
def embedding_value(m):
    """Scaled embedding of a token whose embedding row is all ones, read two ways: the embedding module's
    output, and the hidden state that enters decoder layer 0 (what the model actually uses)."""
    emb = m.get_input_embeddings()
    emb.weight.fill_(1.0)
    ids = torch.tensor([[1, 2]])
    a = emb(ids)[0, 0, 0]
    seen = {}
    layer0 = text_model(m).layers[0]

    def hook(mod, args, kwargs):
        hs = args[0] if args else kwargs["hidden_states"]
        seen["x"] = hs[0, 0, 0].clone()

    h = layer0.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        m(ids)
    finally:
        h.remove()
    b = seen["x"]
    return float(a.float()), str(a.dtype), float(b.float()), str(b.dtype)


def embed_scale_table(out_root):
    rows = []
    for H in EMBED_SIZES:
        row = {"hidden_size": H, "sqrt_float64": H ** 0.5}
        for fam in ("gemma2", "gemma3", "gemma4"):
            r = {}
            for dname, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
                m = tiny_family(fam, H).to(dt).eval()
                ev, edt, lv, ldt = embedding_value(m)
                r[dname] = {"embedding_module_output": ev, "layer0_input": lv, "dtype": ldt}
                if dname == "bf16":
                    d = tempfile.mkdtemp()
                    m.float().save_pretrained(d)
                    m2 = type(m).from_pretrained(d, dtype=torch.bfloat16).eval()
                    ev2, _, lv2, ldt2 = embedding_value(m2)
                    r["bf16_via_from_pretrained"] = {"embedding_module_output": ev2, "layer0_input": lv2,
                                                     "dtype": ldt2}
                    shutil.rmtree(d)
            row[fam] = r
        vals = {d: {row[f][d]["layer0_input"] for f in ("gemma2", "gemma3", "gemma4")} for d in ("fp32", "bf16", "fp16")}
        vals["bf16_via_from_pretrained"] = {row[f]["bf16_via_from_pretrained"]["layer0_input"]
                                            for f in ("gemma2", "gemma3", "gemma4")}
        row["summary"] = {d: (sorted(v)[0] if len(v) == 1 else sorted(v)) for d, v in vals.items()}
        row["same_in_all_three_families"] = all(len(v) == 1 for v in vals.values())
        rows.append(row)
        log(f"[embed_scale] H={H} {row['summary']} same={row['same_in_all_three_families']}")
    doc = {
        "what": "sqrt(hidden_size) embedding scale as transformers materialises it: the value that enters decoder "
                "layer 0 (and the embedding module's output) for a token whose embedding row is all ones, in a model "
                "cast to each dtype with .to(dtype); bf16 also via save_pretrained + from_pretrained(dtype=bfloat16).",
        "computed_with": {"transformers": transformers.__version__, "torch": torch.__version__,
                          "script": "tools/gen_random_references.py"},
        "table": [{"hidden_size": r["hidden_size"], "fp32": r["summary"]["fp32"], "bf16": r["summary"]["bf16"],
                   "fp16": r["summary"]["fp16"], "bf16_via_from_pretrained": r["summary"]["bf16_via_from_pretrained"],
                   "sqrt_float64": r["sqrt_float64"], "same_in_gemma2_gemma3_gemma4": r["same_in_all_three_families"]}
                  for r in rows],
        "detail": rows,
    }
    with open(os.path.join(out_root, "embed_scale_reference.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", default="")
    ap.add_argument("--no-embed-scale", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    g = torch.Generator().manual_seed(99)
    ids = torch.randint(3, 512, (1, 80), generator=g)
    ids[0, 0] = 2
    only = set(a.only.split(",")) if a.only else None
    failed = []
    for spec in MODELS:
        if only and spec["name"] not in only:
            continue
        try:
            make_one(spec, a.out, ids)
        except Exception:
            traceback.print_exc()
            failed.append(spec["name"])
    if not a.no_embed_scale and (not only or "embed_scale" in only):
        try:
            embed_scale_table(a.out)
        except Exception:
            traceback.print_exc()
            failed.append("embed_scale")
    log("FAILED:" if failed else "ALL OK", failed)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

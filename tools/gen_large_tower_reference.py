#!/usr/bin/env python3
"""Gemma 4 large ("26B/31B") vision tower reference: a tiny random Gemma4ForConditionalGeneration whose
vision_config has the large tower's switches (standardize = true: the std_bias / std_scale step,
use_clipped_linears = false) and a head dim that is not a power of two, run by transformers 5.17 in
float32 on one synthetic patch grid (6 x 9 patches -> 2 x 3 = 6 soft tokens). The fixtures of
shared/models only have the on-device tower (clipped linears, no standardize).

Run on the GPU machine, from the repository root:  python3 tools/gen_large_tower_reference.py OUT_DIR
Writes OUT_DIR/gemma4-large-tower/{config.json, model.safetensors, reference.json,
reference_arrays.safetensors} -> tests/fixtures/gemma4-large-tower. Deterministic (seeded).
reference_arrays: pixel_values F32 [54, 768] (values in [0, 1], as the processor's rescale gives),
image_position_ids I32 [54, 2] (x = column, y = row), soft_tokens F32 [6, 64] (the rows the model
writes into inputs_embeds at the image tokens), embed_vision_input F32 [6, 48] (the pooled,
standardised tower output the embedder takes), and soft_tokens_unstandardized (the same run with
std_bias = 0, std_scale = 1: shows that the step matters).
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_random_references as G  # noqa: E402

OUT = sys.argv[1]
S, F = "sliding_attention", "full_attention"
TEXT = {
    "model_type": "gemma4_text", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "global_head_dim": 32, "num_global_key_value_heads": None, "attention_k_eq_v": False,
    "sliding_window": 8, "layer_types": [S, F],
    "rope_parameters": {S: {"rope_type": "default", "rope_theta": 10000.0},
                        F: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}},
    "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 512, "num_kv_shared_layers": 0,
    "use_double_wide_mlp": False, "enable_moe_block": False, "num_experts": None, "top_k_experts": None,
    "moe_intermediate_size": None, "final_logit_softcapping": 30.0, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-06, "hidden_activation": "gelu_pytorch_tanh", "initializer_range": 0.02,
    "attention_bias": False, "attention_dropout": 0.0, "use_bidirectional_attention": None,
    "tie_word_embeddings": True, "use_cache": True, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
}
VISION = {
    "model_type": "gemma4_vision", "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 24, "patch_size": 16,
    "pooling_kernel_size": 3, "position_embedding_size": 64, "rms_norm_eps": 1e-06,
    "use_clipped_linears": False, "standardize": True,
}
TOP = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
       "boi_token_id": 500, "eoi_token_id": 501, "image_token_id": 502, "video_token_id": 503,
       "boa_token_id": 504, "eoa_token_index": 505, "audio_token_id": 506,
       "initializer_range": 0.02, "tie_word_embeddings": True}
NPH, NPW = 6, 9


def randomize_towers(model, g):
    with torch.no_grad():
        std_buffers = [(n, b) for n, b in model.named_buffers() if "std_" in n]
        for name, p in list(model.named_parameters()) + std_buffers:
            if not p.is_floating_point():
                continue
            if not (".vision_tower." in "." + name or "embed_vision" in name):
                continue
            if name.endswith("std_scale"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            elif name.endswith("std_bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.dim() >= 2 and "position" not in name:
                p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))


def main():
    from transformers import Gemma4ForConditionalGeneration
    out = os.path.join(OUT, "gemma4-large-tower")
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    hub = dict(TOP, text_config=TEXT, vision_config=VISION)
    spec = {"name": "gemma4-large-tower", "family": "gemma4", "wrapper": True, "init": G.INIT_G4_WRAPPER,
            "seed": 5100, "hub": hub}
    torch.manual_seed(spec["seed"])
    cfg = G.build_config(spec, hub)
    model = Gemma4ForConditionalGeneration(cfg).eval()
    G.randomize(model, spec, spec["seed"])
    randomize_towers(model, torch.Generator().manual_seed(5101))
    names = [n for n, _ in list(model.named_parameters()) + list(model.named_buffers()) if "std_" in n]
    print("std tensors:", names, "vision tensors:", [n for n, _ in model.named_buffers() if "vision" in n][:8], flush=True)
    assert names, "no std_bias / std_scale; vision tensors: " + str(
        [n for n, _ in list(model.named_parameters()) + list(model.named_buffers()) if "vision" in n])
    model.save_pretrained(out)  # float32 weights
    del model
    if os.path.exists(os.path.join(out, "generation_config.json")):
        os.remove(os.path.join(out, "generation_config.json"))
    G.write_hub_config(out, hub)
    m = Gemma4ForConditionalGeneration.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").cuda().eval()
    print("standardize:", m.config.vision_config.standardize, "clipped:", m.config.vision_config.use_clipped_linears,
          flush=True)

    g = torch.Generator().manual_seed(5102)
    P = NPH * NPW
    pixels = torch.rand(P, 768, generator=g).float()
    pos = torch.tensor([[c, r] for r in range(NPH) for c in range(NPW)], dtype=torch.int64)
    n_soft = P // 9
    ids = [2, 500] + [502] * n_soft + [501, 7, 11, 13]
    captured = {}

    def first_tensor(args, kwargs, key):
        if kwargs.get(key) is not None:
            return kwargs[key]
        for a in list(args) + list(kwargs.values()):
            if torch.is_tensor(a) and a.is_floating_point():
                return a
        raise RuntimeError("no float tensor among the inputs of the hooked module")

    def pre_lm(mod, args, kwargs):
        captured["embeds"] = first_tensor(args, kwargs, "inputs_embeds").detach().float().cpu()

    def pre_emb(mod, args, kwargs):
        captured["emb_in"] = first_tensor(args, kwargs, "inputs_embeds").detach().float().cpu()

    h1 = m.model.language_model.register_forward_pre_hook(pre_lm, with_kwargs=True)
    h2 = m.model.embed_vision.register_forward_pre_hook(pre_emb, with_kwargs=True)

    def run():
        with torch.no_grad():
            m(input_ids=torch.tensor([ids], device="cuda"), pixel_values=pixels[None].cuda(),
              image_position_ids=pos[None].cuda(), use_cache=False)
        rows = torch.tensor([t == 502 for t in ids])
        return captured["embeds"][0][rows].clone(), captured["emb_in"].reshape(-1, VISION["hidden_size"]).clone()

    soft, emb_in = run()
    vt = m.model.vision_tower
    with torch.no_grad():
        both = list(vt.named_parameters()) + list(vt.named_buffers())
        sb = [p for n, p in both if n.endswith("std_bias")][0]
        ss = [p for n, p in both if n.endswith("std_scale")][0]
        keep = (sb.clone(), ss.clone())
        sb.zero_()
        ss.fill_(1.0)
        soft_plain, _ = run()
        sb.copy_(keep[0])
        ss.copy_(keep[1])
    h1.remove()
    h2.remove()
    d = (soft - soft_plain).abs().max().item()
    print("soft tokens", tuple(soft.shape), "max", soft.abs().max().item(), "standardize moves them by", d, flush=True)
    save_file({"pixel_values": pixels.contiguous(), "image_position_ids": pos.to(torch.int32).contiguous(),
               "soft_tokens": soft.contiguous(), "embed_vision_input": emb_in.contiguous(),
               "soft_tokens_unstandardized": soft_plain.contiguous()},
              os.path.join(out, "reference_arrays.safetensors"))
    json.dump({"input_ids": ids, "grid": [NPH, NPW], "num_soft_tokens": n_soft,
               "standardize_delta": d, "computed_with": {"transformers": __import__("transformers").__version__,
                                                         "torch": torch.__version__, "dtype": "float32", "attn": "eager"}},
              open(os.path.join(out, "reference.json"), "w"), indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""transformers 5.17 references for two image features the trained fixtures do not exercise:

A. Gemma 3 pan-and-scan (gemma-multimodal.md §1.2.1): Gemma3Processor (the torchvision-backend
   Gemma3ImageProcessor, v5's default) with do_pan_and_scan on the images in IN_DIR, through the
   real tiny-gemma3-vision processor files (processor_config.json, tokenizer.json,
   tokenizer_config.json, chat_template.jinja, config.json; no weights). Per case: the prompt as
   given, the exact text the processor handed to its tokenizer (captured by wrapping the tokenizer
   class's __call__), input_ids, token_type_ids, num_crops, and per pixel_values entry (original
   first, then its crops) an exact bitwise checksum of the float32 values plus sampled values.
   Case "custom": a processor_config.json with do_pan_and_scan true and non-default settings
   (written to OUT_DIR/custom_processor_config.json), loaded with AutoProcessor and called with no
   pan-and-scan kwargs, so the settings come from the file.
B. Gemma 4 with text_config.use_bidirectional_attention = "vision" (the 26B/31B image mask,
   §2.5.3): a tiny random Gemma4ForConditionalGeneration (vocab 512 holding the image token ids,
   sliding window 8, image blocks of 12 and 10 tokens so that a block is longer than the window),
   saved in bf16, reloaded in float32 / eager / TF32 off; inputs_embeds = the text embeddings with
   the image rows replaced by seeded random soft tokens, mm_token_type_ids 1 on the image rows.
   Logits at chosen positions with the real mm_token_type_ids and with them zeroed (causal), plus
   transformers' logits under explicit 4-D masks of the three published rules (A)/(B)/(C), to show
   which one 5.17 applies.

Run on the GPU machine:  python3 tools/gen_panscan_reference.py IN_DIR OUT_DIR
(from the repository root: part B imports tools/gen_random_references.py). IN_DIR holds the
tiny-gemma3-vision processor files under g3/ (processor_config.json, tokenizer.json,
tokenizer_config.json, chat_template.jinja, config.json) and its inputs/ images under images/.
OUT_DIR gets panscan_reference.json, wide_1000x260.png, custom_processor_config.json, log.txt,
gemma4-vision-mask/{config.json, model.safetensors, reference.json, reference_arrays.safetensors}.
Fixtures: OUT_DIR/gemma4-vision-mask -> tests/fixtures/gemma4-vision-mask; panscan_reference.json
and wide_1000x260.png -> tests/fixtures/gemma3-panscan/, custom_processor_config.json ->
tests/fixtures/gemma3-panscan/custom/processor_config.json. Both parts are deterministic.
"""
import json
import os
import shutil
import sys
import traceback

import numpy as np
import PIL.Image
import torch
import transformers

IN, OUT = sys.argv[1], sys.argv[2]
os.makedirs(OUT, exist_ok=True)
LOG = []


def log(*a):
    s = " ".join(str(x) for x in a)
    LOG.append(s)
    print(s, flush=True)


# ------------------------------------------------------------------------------------------------
# A. pan-and-scan
# ------------------------------------------------------------------------------------------------


def make_wide(path):
    """1000x260 RGB: x/y ramps and a 25x20 checkerboard (last crop 332 wide with 3 crops)."""
    w, h = 1000, 260
    x = np.arange(w)[None, :].repeat(h, 0)
    y = np.arange(h)[:, None].repeat(w, 1)
    a = np.zeros((h, w, 3), np.uint8)
    a[..., 0] = (x * 255) // (w - 1)
    a[..., 1] = (y * 255) // (h - 1)
    a[..., 2] = ((x // 25 + y // 20) % 2) * 200 + 30
    PIL.Image.fromarray(a, "RGB").save(path, optimize=True)


def checksum(pv):
    """Exact: sum over i of uint64(bits(float32 value i)) * (2i + 1), mod 2^64."""
    bits = np.ascontiguousarray(pv.astype(np.float32)).reshape(-1).view(np.uint32).astype(np.uint64)
    w = np.arange(bits.size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    with np.errstate(over="ignore"):
        return int(np.sum(bits * w, dtype=np.uint64))


def summarize(pv, n_samples=96):
    flat = pv.astype(np.float32).reshape(-1)
    rng = np.random.default_rng(flat.size)
    idx = np.sort(rng.choice(flat.size, n_samples, replace=False))
    return {"shape": list(pv.shape), "checksum": str(checksum(pv)), "sum": float(flat.astype(np.float64).sum()),
            "min": float(flat.min()), "max": float(flat.max()),
            "sample_index": [int(i) for i in idx], "sample_value": [float(flat[i]) for i in idx]}


def part_a():
    from transformers import AutoProcessor
    g3 = os.path.join(IN, "g3")
    imgdir = os.path.join(IN, "images")
    make_wide(os.path.join(imgdir, "wide_1000x260.png"))
    shutil.copy(os.path.join(imgdir, "wide_1000x260.png"), os.path.join(OUT, "wide_1000x260.png"))

    proc = AutoProcessor.from_pretrained(g3)
    log("A: processor", type(proc).__name__, "image processor", type(proc.image_processor).__name__,
        "tokenizer", type(proc.tokenizer).__name__)
    captured = []
    tok_cls = type(proc.tokenizer)
    orig_call = tok_cls.__call__

    def capture(self, text=None, *a, **k):
        captured.append(text)
        return orig_call(self, text, *a, **k)

    tok_cls.__call__ = capture
    # The processor's own crop counts, as replace_image_token sees them (the output drops num_crops).
    seen_crops = []
    proc_cls = type(proc)
    orig_replace = proc_cls.replace_image_token

    def replace(self, image_inputs, image_idx, **kw):
        try:
            seen_crops.append(int(image_inputs["num_crops"][image_idx]))
        except Exception:
            seen_crops.append(None)
        return orig_replace(self, image_inputs, image_idx, **kw)

    proc_cls.replace_image_token = replace

    def load(name):
        return PIL.Image.open(os.path.join(imgdir, name))

    ref = {"computed_with": {"transformers": transformers.__version__, "torch": torch.__version__,
                             "PIL": PIL.__version__, "numpy": np.__version__,
                             "processor": type(proc).__name__,
                             "image_processor": type(proc.image_processor).__name__,
                             "script": "tools/gen_panscan_reference.py"},
           "checksum": "sum over i of uint64(bits(float32 pixel_values[i])) * (2i + 1) mod 2^64, row-major [3, H, W]",
           "cases": []}

    def run_case(cid, p, text, images, kwargs, kind="plain", messages=None):
        captured.clear()
        seen_crops.clear()
        out = p(text=[text], images=[[load(n) for n in images]], return_tensors="pt", **kwargs)
        ids = out["input_ids"][0].tolist()
        tt = out["token_type_ids"][0].tolist() if out.get("token_type_ids") is not None else None
        pv = out["pixel_values"].float().numpy()
        sent = captured[-1] if captured else None
        if isinstance(sent, list):
            sent = sent[0]
        # The processor drops num_crops (unused_input_names): take it from the image processor
        # alone, called with the processor's merged image kwargs, which must give the same pixels.
        ip_kw = {k: v for k, v in kwargs.items() if k.startswith(("do_pan", "pan_"))}
        if kind == "custom":  # what the processor merged from the file
            ip = p.image_processor
            ip_kw = {k: getattr(ip, k) for k in ("do_pan_and_scan", "pan_and_scan_min_crop_size",
                                                   "pan_and_scan_max_num_crops", "pan_and_scan_min_ratio_to_activate")}
            log("A: custom image processor settings", ip_kw)
        try:
            alone = p.image_processor([load(n) for n in images], return_tensors="pt", **ip_kw)
            same_alone = bool(torch.equal(alone["pixel_values"].float(), out["pixel_values"].float()))
        except Exception:
            log(f"A: case {cid}: the image processor alone failed\n" + traceback.format_exc())
            alone, same_alone = {}, None
        nc = alone.get("num_crops")
        if nc is not None:
            nc = nc.tolist() if hasattr(nc, "tolist") else nc
            nc = [int(v) for v in np.array(nc).reshape(-1)]
        else:
            log(f"A: case {cid}: no num_crops from the image processor either")
        c = {"id": cid, "kind": kind, "text": text, "images": images, "kwargs": kwargs,
             "processor_text": sent, "input_ids": ids, "token_type_ids": tt, "num_crops": nc,
             "processor_num_crops": list(seen_crops),
             "pixel_values": [summarize(pv[i]) for i in range(pv.shape[0])],
             "image_processor_alone_equal": same_alone}
        if sent is None:
            c["decoded"] = p.tokenizer.decode(ids, skip_special_tokens=False)
        if messages is not None:
            c["messages"] = messages
        ref["cases"].append(c)
        log(f"A: case {cid}: num_crops {nc}, {pv.shape[0]} pixel arrays, {len(ids)} ids, "
            f"processor saw {seen_crops}, {ids.count(62)} image tokens, alone-equal {same_alone}, text captured {sent is not None}")

    pas = {"do_pan_and_scan": True}
    cases = [
        ("tall_checker", "<start_of_image>Describe this.", ["img_checker_300x800.png"], pas),
        ("wide_and_square", "Compare <start_of_image> with <start_of_image> please.",
         ["wide_1000x260.png", "img_gradient_224x224.png"], pas),
        ("jpeg_two_crops", "<start_of_image>", ["img_shapes_640x480.jpg"], pas),
        ("no_crops_small", "<start_of_image>What?", ["img_gray_320x240.png"], pas),
        ("off_by_default", "<start_of_image>Describe this.", ["img_checker_300x800.png"], {}),
        ("custom_kwargs", "<start_of_image> and <start_of_image> and <start_of_image>",
         ["img_gray_320x240.png", "img_rgba_256x192.png", "wide_1000x260.png"],
         dict(pas, pan_and_scan_min_crop_size=128, pan_and_scan_max_num_crops=3,
              pan_and_scan_min_ratio_to_activate=1.1)),
    ]
    for cid, text, imgs, kw in cases:
        try:
            run_case(cid, proc, text, imgs, kw)
        except Exception:
            log(f"A: case {cid} FAILED\n" + traceback.format_exc())
    # Chat: the checkpoint's template, then the processor on the rendered text (as
    # apply_chat_template(tokenize=True) does: add_special_tokens=False, the template writes <bos>).
    try:
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in this picture?"}]}]
        rendered = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        run_case("chat_jpeg", proc, rendered, ["img_shapes_640x480.jpg"], dict(pas, add_special_tokens=False),
                 kind="chat", messages=messages)
    except Exception:
        log("A: chat case FAILED\n" + traceback.format_exc())
    # Settings from the processor config.
    cdir = os.path.join(IN, "_custom")
    try:
        shutil.copytree(g3, cdir)
        pc = json.load(open(os.path.join(cdir, "processor_config.json")))
        pc["image_processor"].update({"do_pan_and_scan": True, "pan_and_scan_min_crop_size": 128,
                                      "pan_and_scan_max_num_crops": 3, "pan_and_scan_min_ratio_to_activate": 1.1})
        with open(os.path.join(cdir, "processor_config.json"), "w") as f:
            json.dump(pc, f, indent=2)
            f.write("\n")
        shutil.copy(os.path.join(cdir, "processor_config.json"), os.path.join(OUT, "custom_processor_config.json"))
        pcustom = AutoProcessor.from_pretrained(cdir)
        run_case("custom_config", pcustom, "<start_of_image> and <start_of_image> and <start_of_image>",
                 ["img_gray_320x240.png", "img_rgba_256x192.png", "wide_1000x260.png"], {}, kind="custom")
    except Exception:
        log("A: custom case FAILED\n" + traceback.format_exc())
    shutil.rmtree(cdir, ignore_errors=True)
    tok_cls.__call__ = orig_call
    proc_cls.replace_image_token = orig_replace
    with open(os.path.join(OUT, "panscan_reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))


# ------------------------------------------------------------------------------------------------
# B. Gemma 4 "vision" mask
# ------------------------------------------------------------------------------------------------

S, F = "sliding_attention", "full_attention"
W = 8
TEXT_B = {
    "model_type": "gemma4_text", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "global_head_dim": 32, "num_global_key_value_heads": None, "attention_k_eq_v": False,
    "sliding_window": W, "layer_types": [S, S, F, S, F],
    "rope_parameters": {S: {"rope_type": "default", "rope_theta": 10000.0},
                        F: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}},
    "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 512, "num_kv_shared_layers": 0,
    "use_double_wide_mlp": False, "enable_moe_block": False, "num_experts": None, "top_k_experts": None,
    "moe_intermediate_size": None, "final_logit_softcapping": 30.0, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-06, "hidden_activation": "gelu_pytorch_tanh", "initializer_range": 0.02,
    "attention_bias": False, "attention_dropout": 0.0, "use_bidirectional_attention": "vision",
    "tie_word_embeddings": True, "use_cache": True, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
}
TOP_B = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
         "boi_token_id": 500, "eoi_token_id": 501, "image_token_id": 502, "video_token_id": 503,
         "boa_token_id": 504, "eoa_token_index": 505, "audio_token_id": 506,
         "initializer_range": 0.02, "tie_word_embeddings": True}


def b_inputs():
    g = torch.Generator().manual_seed(77)
    text = lambda n: torch.randint(3, 490, (n,), generator=g).tolist()
    ids = [2] + text(5) + [500] + [502] * 12 + [501] + text(6) + [500] + [502] * 10 + [501] + text(12)
    types = [1 if t == 502 else 0 for t in ids]
    return ids, types


def block_ids(types):
    b, cur, prev = [], -1, 0
    for t in types:
        if t == 1 and prev != 1:
            cur += 1
        b.append(cur if t == 1 else -1)
        prev = t
    return b


def rule_mask(rule, layer_type, blocks, T):
    """allowed[q, k] for the three published rules (gemma-multimodal.md §2.5.3)."""
    m = torch.zeros(T, T, dtype=torch.bool)
    for q in range(T):
        for k in range(T):
            causal = k <= q
            same = blocks[q] >= 0 and blocks[q] == blocks[k]
            win = k > q - W
            if layer_type == F:
                a = (causal or same) if rule == "B" else causal
            elif rule == "C":
                a = (causal or same) and win
            else:  # A, B
                a = (causal and win) or same
            m[q, k] = a
    return m


def part_b():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
    import gen_random_references as G
    from transformers import Gemma4ForConditionalGeneration
    from safetensors.torch import save_file

    name = "gemma4-vision-mask"
    out = os.path.join(OUT, name)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    hub = dict(TOP_B, text_config=TEXT_B, vision_config=G.TINY_VISION)
    spec = {"name": name, "family": "gemma4", "wrapper": True, "init": G.INIT_G4_WRAPPER, "seed": 4300, "hub": hub}
    seed = spec["seed"]
    torch.manual_seed(seed)
    cfg = G.build_config(spec, hub)
    model = Gemma4ForConditionalGeneration(cfg).eval()
    G.randomize(model, spec, seed)
    model = model.to(torch.bfloat16)
    model.save_pretrained(out)
    del model
    for f in ("generation_config.json",):
        if os.path.exists(os.path.join(out, f)):
            os.remove(os.path.join(out, f))
    saved_cfg = json.load(open(os.path.join(out, "config.json")))
    G.write_hub_config(out, hub)
    m = Gemma4ForConditionalGeneration.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").cuda().eval()
    log("B: loaded; use_bidirectional_attention =", m.config.get_text_config().use_bidirectional_attention)

    ids, types = b_inputs()
    T, H = len(ids), TEXT_B["hidden_size"]
    g = torch.Generator().manual_seed(78)
    n_img = sum(types)
    soft = (torch.randn(n_img, H, generator=g) * 0.4).float()
    ids_t = torch.tensor([ids], device="cuda")
    with torch.no_grad():
        emb = m.get_input_embeddings()(ids_t).float()
        img_rows = torch.tensor(types, device="cuda").bool()
        emb[0, img_rows] = soft.cuda()
        tt = torch.tensor([types], device="cuda")

        def fwd(mm, attention_mask=None):
            kw = {"inputs_embeds": emb, "use_cache": False}
            if mm is not None:
                kw["mm_token_type_ids"] = mm
            if attention_mask is not None:
                kw["attention_mask"] = attention_mask
            return m(**kw).logits[0].float().cpu()

        logits = fwd(tt)
        causal = fwd(torch.zeros_like(tt))
        blocks = block_ids(types)
        rules = {}
        for rule in ("A", "B", "C"):
            try:
                md = {}
                for lt in (S, F):
                    allowed = rule_mask(rule, lt, blocks, T)
                    add = torch.zeros(T, T)
                    add[~allowed] = torch.finfo(torch.float32).min
                    md[lt] = add[None, None].cuda()
                lr = fwd(tt, attention_mask=md)
                rules[rule] = float((lr - logits).abs().max())
            except Exception:
                rules[rule] = "failed: " + traceback.format_exc()[-400:]
        log("B: max |logits - rule(X) logits|:", rules, " causal vs default:", float((causal - logits).abs().max()))
        cpu = m.float().cpu()
        emb_c = emb.cpu()
        cpu_logits = cpu(inputs_embeds=emb_c, mm_token_type_ids=tt.cpu(), use_cache=False).logits[0].float()
        d_cpu = float((cpu_logits - logits).abs().max())
    positions = [0, 6, 7, 12, 18, 19, 20, 26, 27, 36, 37, 40, T - 1]
    pos_t = torch.tensor(positions)
    save_file({"soft_tokens": soft.contiguous(), "logits": logits[pos_t].contiguous(),
               "logits_causal": causal[pos_t].contiguous()}, os.path.join(out, "reference_arrays.safetensors"))
    ref = {"computed_with": {"transformers": transformers.__version__, "torch": torch.__version__,
                             "dtype": "float32 (bf16 weights upcast)", "attn_implementation": "eager", "tf32": False,
                             "device": torch.cuda.get_device_name(0), "script": "tools/gen_panscan_reference.py"},
           "seed": seed, "init": spec["init"], "input_ids": ids, "mm_token_type_ids": types,
           "block_ids": blocks, "positions": positions,
           "arrays": {"soft_tokens": "[n_image_rows, H] rows that replace the image positions (unscaled)",
                      "logits": "[positions, V] with mm_token_type_ids", "logits_causal": "[positions, V] types zeroed"},
           "max_abs_diff_vs_explicit_rule_masks": rules,
           "max_abs_diff_causal_vs_vision": float((causal - logits).abs().max()),
           "max_abs_diff_cpu_vs_gpu_float32": d_cpu,
           "config_as_saved_by_transformers": saved_cfg}
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)


if __name__ == "__main__":
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for part in (part_a, part_b):
        try:
            part()
        except Exception:
            log(f"{part.__name__} FAILED\n" + traceback.format_exc())
    with open(os.path.join(OUT, "log.txt"), "w") as f:
        f.write("\n".join(LOG) + "\n")

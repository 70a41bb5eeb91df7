#!/usr/bin/env python3
"""EmbeddingGemma-style references from sentence-transformers, for the embedding path.

Run on the GPU machine (transformers 5.17, sentence-transformers, torch; CPU float32 is used so the
numbers do not depend on TF32):
    python3 tools/gen_embedding_references.py TOKENIZER_DIR OUT_DIR
TOKENIZER_DIR holds the tiny byte-fallback BPE (shared/tokenizers/tiny-gemma: tokenizer.json,
tokenizer_config.json). Writes:

OUT_DIR/tiny-embeddinggemma/   a complete sentence-transformers folder in EmbeddingGemma's layout
    (modules.json, config.json with `Gemma3TextModel` + `use_bidirectional_attention: true`,
    model.safetensors float32, 1_Pooling/config.json (mean), 2_Dense (64->256, no bias, identity),
    3_Dense (256->64), config_sentence_transformers.json with EmbeddingGemma's prompt names, the tiny
    tokenizer with the post-processor changed to add <bos> ... <eos> as EmbeddingGemma's does)
    with random weights (torch seed 1234), and reference.json: for each text and each prompt name
    (none, "query", "document") the input ids, the mean-pooled vector, both dense outputs and the
    final normalised embedding, plus Matryoshka truncations (32, 16) re-normalised
    (`encode(..., truncate_dim=d, normalize_embeddings=True)`). Sliding window 8 with bidirectional
    attention, so texts of ~40 tokens exercise the symmetric window rule; `eager_max_diff` records how
    far eager attention is from the default (sdpa) one.

OUT_DIR/real-shape-reference.json   EmbeddingGemma-300m's real shapes (hidden 768, 24 layers, 3 heads,
    1 kv head, head_dim 256, intermediate 1152, sliding window 512, vocab 262144, dense 768->3072->768)
    with DETERMINISTIC weights a C++ test can regenerate (no weight file is stored):
        seed(name)  = FNV-1a 64 of the tensor name bytes
        z_i         = splitmix64(seed + (i + 1) * 0x9E3779B97F4A7C15)   (i = flat row-major index)
        value_i     = float32(((z_i >> 40) / 2**24 * 2 - 1) * scale)     (computed in float64)
    with scale per tensor listed in the file (tensors: name, shape, scale). Inputs are token ids
    (BOS 2 ... EOS 1 already included), so no tokenizer is needed; lengths cross the 512 window.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
PROMPTS = {
    "query": "task: search result | query: ",
    "document": "title: none | text: ",
    "BitextMining": "task: search result | query: ",
    "Clustering": "task: clustering | query: ",
    "Classification": "task: classification | query: ",
    "InstructionRetrieval": "task: code retrieval | query: ",
    "MultilabelClassification": "task: classification | query: ",
    "PairClassification": "task: sentence similarity | query: ",
    "Reranking": "task: search result | query: ",
    "Retrieval": "task: search result | query: ",
    "Retrieval-query": "task: search result | query: ",
    "Retrieval-document": "title: none | text: ",
    "STS": "task: sentence similarity | query: ",
    "Summarization": "task: summarization | query: ",
}
TEXTS = [
    "The river ran past the old mill.",
    "A short one.",
    "In the morning the fishermen went down to the harbour, mended their nets, and talked about the "
    "weather, the price of bread and the long winter that was coming over the hills.",
    "Numbers 12345 and symbols: café, naïve, 日本語.",
]


def fnv1a64(name):
    h = 0xCBF29CE484222325
    for b in name.encode("utf-8"):
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def splitmix_values(name, count, scale):
    with np.errstate(over="ignore"):
        idx = np.arange(1, count + 1, dtype=np.uint64)
        z = np.uint64(fnv1a64(name)) + idx * GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(40)).astype(np.float64) / float(1 << 24)
    return ((u * 2.0 - 1.0) * scale).astype(np.float32)


def text_config(**kw):
    from transformers import Gemma3TextConfig
    return Gemma3TextConfig(
        attention_bias=False, attn_logit_softcapping=None, final_logit_softcapping=None,
        hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, use_bidirectional_attention=True,
        bos_token_id=2, eos_token_id=1, pad_token_id=0, max_position_embeddings=2048,
        tie_word_embeddings=True, **kw)


def build_st(folder, cfg, dense_mid, seed, tokenizer_dir):
    """Saves a SentenceTransformer folder in EmbeddingGemma's layout and returns the loaded model."""
    from transformers import Gemma3TextModel
    from sentence_transformers import SentenceTransformer, models
    torch.manual_seed(seed)
    os.makedirs(folder, exist_ok=True)
    base = Gemma3TextModel(cfg).to(torch.float32)
    base.save_pretrained(folder, safe_serialization=True)
    if tokenizer_dir:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tokenizer_dir, f), os.path.join(folder, f))
        tj = json.load(open(os.path.join(folder, "tokenizer.json")))
        tj["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "<eos>", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<eos>", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "<eos>", "type_id": 1}}],
            "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]},
                               "<eos>": {"id": "<eos>", "ids": [1], "tokens": ["<eos>"]}}}
        json.dump(tj, open(os.path.join(folder, "tokenizer.json"), "w"), ensure_ascii=False)
        tc = json.load(open(os.path.join(folder, "tokenizer_config.json")))
        tc["add_bos_token"] = True
        tc["add_eos_token"] = True
        tc["model_max_length"] = 2048
        tc["padding_side"] = "right"
        # EmbeddingGemma embeds plain text: without a chat template sentence-transformers 6 keeps the
        # "text" modality (with one it renders every input through the template).
        tc.pop("chat_template", None)
        json.dump(tc, open(os.path.join(folder, "tokenizer_config.json"), "w"), ensure_ascii=False,
                  indent=2)
    if os.path.exists(os.path.join(folder, "chat_template.jinja")):
        os.remove(os.path.join(folder, "chat_template.jinja"))
    word = models.Transformer(folder, max_seq_length=2048,
                              model_args={"attn_implementation": "sdpa", "dtype": torch.float32})
    hid = cfg.hidden_size
    pool = models.Pooling(hid, pooling_mode="mean")
    d1 = models.Dense(hid, dense_mid, bias=False, activation_function=torch.nn.Identity())
    d2 = models.Dense(dense_mid, hid, bias=False, activation_function=torch.nn.Identity())
    st = SentenceTransformer(modules=[word, pool, d1, d2, models.Normalize()], device="cpu")
    st.prompts = dict(PROMPTS)
    st.default_prompt_name = None
    st.similarity_fn_name = "cosine"
    return st


def stages(st, features):
    """Runs the modules one by one, recording each stage's output (float64 lists)."""
    out = {}
    with torch.no_grad():
        f = st[0](dict(features))
        out["token_embeddings"] = f["token_embeddings"][0].double().tolist()
        f = st[1](f)
        out["pooled"] = f["sentence_embedding"][0].double().tolist()
        f = st[2](f)
        out["dense1"] = f["sentence_embedding"][0].double().tolist()
        f = st[3](f)
        out["dense2"] = f["sentence_embedding"][0].double().tolist()
        f = st[4](f)
        out["embedding"] = f["sentence_embedding"][0].double().tolist()
    return out


def tiny(tokenizer_dir, out_dir):
    folder = os.path.join(out_dir, "tiny-embeddinggemma")
    cfg = text_config(vocab_size=8192, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                      query_pre_attn_scalar=32, sliding_window=8,
                      layer_types=["sliding_attention"] * 3 + ["full_attention"],
                      rope_parameters={"full_attention": {"rope_type": "default",
                                                          "rope_theta": 1000000.0},
                                       "sliding_attention": {"rope_type": "default",
                                                             "rope_theta": 10000.0}})
    cfg.architectures = ["Gemma3TextModel"]
    st = build_st(folder, cfg, 256, 1234, tokenizer_dir)
    # Larger random weights than the initializer's 0.02 so attention is not uniform and the
    # bidirectional window visibly matters; norms away from zero.
    with torch.no_grad():
        g = torch.Generator().manual_seed(99)
        for name, p in st.named_parameters():
            if "norm" in name:
                p.copy_(torch.empty_like(p).uniform_(-0.5, 0.5, generator=g))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / (p.shape[1] ** 0.5) *
                        (1.0 if "embed" not in name else 8.0 / (p.shape[1] ** 0.5)))
    st.save(folder)
    if os.path.exists(os.path.join(folder, "chat_template.jinja")):
        os.remove(os.path.join(folder, "chat_template.jinja"))
    # Reload from disk: the reference must be what a user of the saved folder gets.
    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(folder, device="cpu", model_kwargs={"attn_implementation": "sdpa"})
    st_eager = SentenceTransformer(folder, device="cpu", model_kwargs={"attn_implementation": "eager"})
    ref = {"source": "sentence-transformers " + __import__("sentence_transformers").__version__ +
           ", transformers " + __import__("transformers").__version__ + ", torch " + torch.__version__ +
           ", CPU float32, sdpa attention", "cases": []}
    eager_diff = 0.0
    for text in TEXTS + [" ".join(TEXTS)]:
        for prompt_name in (None, "query", "document"):
            full = (PROMPTS[prompt_name] if prompt_name else "") + text
            feats = st.tokenize([full])
            ids = feats["input_ids"][0].tolist()
            assert ids[0] == 2 and ids[-1] == 1 and 1 not in ids[1:-1], ids  # <bos> ... <eos>
            case = {"text": text, "prompt_name": prompt_name, "prompted_text": full,
                    "input_ids": feats["input_ids"][0].tolist()}
            case.update(stages(st, feats))
            enc = st.encode([text], prompt_name=prompt_name, convert_to_numpy=True)[0]
            case["encode"] = enc.astype(np.float64).tolist()
            case["truncated"] = {}
            for d in (32, 16):
                t = st.encode([text], prompt_name=prompt_name, truncate_dim=d,
                              normalize_embeddings=True, convert_to_numpy=True)[0]
                case["truncated"][str(d)] = t.astype(np.float64).tolist()
            e2 = st_eager.encode([text], prompt_name=prompt_name, convert_to_numpy=True)[0]
            eager_diff = max(eager_diff, float(np.abs(e2 - enc).max()))
            ref["cases"].append(case)
    # A batch with padding must give the same vectors as one at a time.
    batch = st.encode(TEXTS, convert_to_numpy=True, batch_size=8)
    single = np.stack([st.encode([t], convert_to_numpy=True)[0] for t in TEXTS])
    ref["batch_vs_single_max_diff"] = float(np.abs(batch - single).max())
    ref["eager_max_diff"] = eager_diff
    json.dump(ref, open(os.path.join(folder, "reference.json"), "w"), indent=1, ensure_ascii=False)
    print("tiny: cases", len(ref["cases"]), "eager diff", eager_diff, "batch diff",
          ref["batch_vs_single_max_diff"])


def real_shape(tokenizer_dir, out_dir):
    folder = "/tmp/real-shape-embeddinggemma"
    cfg = text_config(vocab_size=262144, hidden_size=768, intermediate_size=1152,
                      num_hidden_layers=24, num_attention_heads=3, num_key_value_heads=1,
                      head_dim=256, query_pre_attn_scalar=256, sliding_window=512,
                      layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 4,
                      rope_parameters={"full_attention": {"rope_type": "default",
                                                          "rope_theta": 1000000.0},
                                       "sliding_attention": {"rope_type": "default",
                                                             "rope_theta": 10000.0}})
    cfg.architectures = ["Gemma3TextModel"]
    st = build_st(folder, cfg, 3072, 1, tokenizer_dir)
    tensors = []
    with torch.no_grad():
        for name, p in st.named_parameters():
            fan_in = p.shape[1] if p.dim() == 2 else 1
            if "norm" in name:
                scale = 0.5
            elif "embed_tokens" in name:
                scale = 0.1
            else:
                scale = 1.0 / (fan_in ** 0.5) * (3.0 ** 0.5)  # unit-variance outputs
            vals = splitmix_values(name, p.numel(), scale).reshape(tuple(p.shape))
            p.copy_(torch.from_numpy(vals))
            tensors.append({"name": name, "shape": list(p.shape), "scale": scale})
    rng = np.random.default_rng(7)
    cases = []
    for n in (6, 700, 1100):
        ids = [2] + rng.integers(4, 262144, size=n - 2).tolist() + [1]
        feats = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, n, dtype=torch.long)}
        s = stages(st, feats)
        s.pop("token_embeddings")
        s["input_ids"] = ids
        cases.append(s)
        print("real shape: length", n, "done", flush=True)
    # Spot values so a C++ generator can be checked on its own.
    spot = {t["name"]: [float(v) for v in splitmix_values(t["name"], 3, t["scale"])] for t in tensors[:4]}
    ref = {"generator": __doc__.split("OUT_DIR/real-shape-reference.json")[1].strip(),
           "config": json.load(open(os.path.join(folder, "config.json"))),
           "modules": ["Transformer", "Pooling(mean)", "Dense 768->3072 no bias", "Dense 3072->768 no bias",
                       "Normalize"],
           "tensors": tensors, "spot_values_first3": spot, "cases": cases,
           "source": "sentence-transformers " + __import__("sentence_transformers").__version__ +
                     ", transformers " + __import__("transformers").__version__ + ", CPU float32"}
    json.dump(ref, open(os.path.join(out_dir, "real-shape-reference.json"), "w"))


if __name__ == "__main__":
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    tok, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    tiny(tok, out)
    if "--tiny-only" not in sys.argv:
        real_shape(tok, out)

#!/usr/bin/env python3
"""Writes GGUF text encoders the way llama.cpp's convert_hf_to_gguf.py lays them out: tensor names
from gguf-py's own TensorNameMap (token_embd, blk.N.attn_q, enc.blk.N.attn_o, ...), the
architecture's metadata keys, 2-D weights quantized by gguf.quants.quantize where their rows are
whole blocks (else F16), 1-D tensors F32 — so fluxrt's name tables are checked against gguf-py's,
not against themselves.

  tests/data/gguf/klein-tiny-qwen3-bf16.gguf  the tiny klein's Qwen3 (tests/data/models/
      flux2-klein-tiny/text_encoder), every tensor BF16 as in the folder: a pipeline on it must give
      the folder's image bit for bit.
  tests/data/gguf/flux1-tiny-t5-bf16.gguf  the tiny FLUX.1's T5 (tests/data/t5_encoder/model) likewise.
  tests/data/gguf/qwen3-gqa-q8_0.gguf  the 28-layer GQA Qwen3 of the encoder goldens
      (tests/data/qwen3_encoder/gqa_model), Q8_0 where rows are 32-blocks, untied lm_head included
      (llama.cpp keeps it as output.weight).
  tests/data/gguf/t5-random-q8_0.gguf  a random T5 v1.1 encoder wide enough for Q8_0 (d_model 64,
      4 heads of 16, d_ff 128, 2 blocks, vocab 300, layer_norm_epsilon 1e-5), as general.architecture
      "t5encoder".

tests/models/test_gguf_text_encoders.cpp and tests/pipelines/test_text_encoder_file.cpp read them.

    python tools/reference/make_tiny_encoder_gguf.py  (a venv with gguf==0.19.0, numpy==2.4.6 from PyPI)
"""
import json
import os

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

from make_tiny_gguf import read_safetensors  # name -> float32 array (bf16 / f32 files)

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "tests", "data")
OUT = os.path.join(DATA, "gguf")


def gguf_name(name_map, hf_name):
    stem, suffix = hf_name.rsplit(".", 1)
    mapped = name_map.get_name(stem)
    if mapped is None:
        raise KeyError(f"gguf-py has no name for {hf_name}")
    return mapped + "." + suffix


def add(writer, name, x, qtype):
    if qtype == T.BF16:
        writer.add_tensor(name, gguf.quants.quantize(x, T.BF16), raw_dtype=T.BF16)
        return
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    if x.ndim == 2 and x.shape[1] % block == 0:
        writer.add_tensor(name, gguf.quants.quantize(x, qtype), raw_dtype=qtype)
    elif x.ndim == 2:
        writer.add_tensor(name, x.astype(np.float16), raw_dtype=T.F16)
    else:
        writer.add_tensor(name, x.astype(np.float32))


def finish(writer, path):
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(path, os.path.getsize(path), "bytes")


def write_qwen3(folder, path, qtype):
    cfg = json.load(open(os.path.join(folder, "config.json")))
    tensors = read_safetensors(os.path.join(folder, "model.safetensors"))
    layers = cfg["num_hidden_layers"]
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, layers)
    w = gguf.GGUFWriter(path, arch="qwen3")
    w.add_context_length(cfg.get("max_position_embeddings", 40960))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(layers)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    theta = cfg.get("rope_theta") or cfg["rope_parameters"]["rope_theta"]
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    for name in sorted(tensors):
        add(w, gguf_name(name_map, name), tensors[name], qtype)
    finish(w, path)


def write_t5(tensors, cfg, path, qtype):
    layers = cfg["num_layers"]
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.T5ENCODER, layers)
    w = gguf.GGUFWriter(path, arch="t5encoder")
    w.add_context_length(512)
    w.add_embedding_length(cfg["d_model"])
    w.add_feed_forward_length(cfg["d_ff"])
    w.add_block_count(layers)
    w.add_head_count(cfg["num_heads"])
    w.add_key_length(cfg["d_kv"])
    w.add_value_length(cfg["d_kv"])
    w.add_layer_norm_eps(cfg["layer_norm_epsilon"])
    w.add_layer_norm_rms_eps(cfg["layer_norm_epsilon"])
    w.add_relative_attn_buckets_count(cfg["relative_attention_num_buckets"])
    for name in sorted(tensors):
        if name == "encoder.embed_tokens.weight":
            continue  # tied to shared.weight; llama.cpp's converter writes one token_embd
        add(w, gguf_name(name_map, name), tensors[name], qtype)
    finish(w, path)


def random_t5():
    cfg = dict(d_model=64, d_kv=16, num_heads=4, d_ff=128, num_layers=2, vocab=300,
               relative_attention_num_buckets=32, layer_norm_epsilon=1e-5)
    rng = np.random.default_rng(20261202)
    D, inner, F = cfg["d_model"], cfg["num_heads"] * cfg["d_kv"], cfg["d_ff"]
    t = {"shared.weight": rng.standard_normal((cfg["vocab"], D)).astype(np.float32),
         "encoder.final_layer_norm.weight": (1 + 0.1 * rng.standard_normal(D)).astype(np.float32),
         "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight":
             rng.standard_normal((cfg["relative_attention_num_buckets"], cfg["num_heads"])).astype(np.float32)}
    for i in range(cfg["num_layers"]):
        p = f"encoder.block.{i}.layer."
        for n, shape in [("0.SelfAttention.q", (inner, D)), ("0.SelfAttention.k", (inner, D)),
                         ("0.SelfAttention.v", (inner, D)), ("0.SelfAttention.o", (D, inner)),
                         ("1.DenseReluDense.wi_0", (F, D)), ("1.DenseReluDense.wi_1", (F, D)),
                         ("1.DenseReluDense.wo", (D, F))]:
            t[p + n + ".weight"] = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
        t[p + "0.layer_norm.weight"] = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)
        t[p + "1.layer_norm.weight"] = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)
    return t, cfg


def main():
    write_qwen3(os.path.join(DATA, "models", "flux2-klein-tiny", "text_encoder"),
                os.path.join(OUT, "klein-tiny-qwen3-bf16.gguf"), T.BF16)
    write_qwen3(os.path.join(DATA, "qwen3_encoder", "gqa_model"), os.path.join(OUT, "qwen3-gqa-q8_0.gguf"), T.Q8_0)
    t5_folder = os.path.join(DATA, "t5_encoder", "model")
    t5_cfg = json.load(open(os.path.join(t5_folder, "config.json")))
    shards = {}
    for f in sorted(os.listdir(t5_folder)):
        if f.endswith(".safetensors"):
            shards.update(read_safetensors(os.path.join(t5_folder, f)))
    write_t5(shards, t5_cfg, os.path.join(OUT, "flux1-tiny-t5-bf16.gguf"), T.BF16)
    tensors, cfg = random_t5()
    write_t5(tensors, cfg, os.path.join(OUT, "t5-random-q8_0.gguf"), T.Q8_0)


if __name__ == "__main__":
    main()

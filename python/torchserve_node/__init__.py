"""The Python side of torchserve-node: the checkpoint contract and the tools that write it
(docs/checkpoint.md).

Model definitions, whose parameter names and scripted forward are the checkpoint format:
  gpt.py             architecture "gpt" (the demo model, nanoGPT, GPT-2)
  llama.py           architecture "llama" (Llama 2/3, Mistral, Qwen2)
  architectures.py   the architecture table (architectures.json) the exporter and the
                     native runtime's tests both read

Exporters (commands in scripts/model/) and what they read and check with:
  export_hf.py       a Hugging Face model directory -> checkpoint
  export_gpt.py      trainer, nanoGPT or GPT-2 weights -> checkpoint; the shared writer and
                     verifier of checkpoints
  export_gguf.py     checkpoint -> GGUF (llama.cpp's format)
  hf_reference.py    plain forwards written from transformers' definitions: every export_hf
                     export is checked against it
  safetensors_io.py  safetensors files and shards
  hf_tokenizer.py    tokenizer.json helpers

  reference.py       the plain Python generation loop over a checkpoint: the serving policy
                     written out, the benchmarks' baseline and the tests' oracle

Nothing is imported here: `from torchserve_node import export_hf` loads what it needs.
"""

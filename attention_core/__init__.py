"""Corpus reading, embedders, the paragraph store with its FAISS index, and (later) the model.

Heavy libraries (numpy, faiss, torch, sentence-transformers) are imported by the
submodules that need them, never here, so ``import nextpara.attention_core`` is cheap.
"""

"""The model: the attention reranker, training, checkpoints, word features, candidate mining, the Predictor, evaluation.

May import the store and torch, never the server, batch jobs or client.
Submodules import what they need, so ``import nextpara.attention_core`` itself is cheap.
"""

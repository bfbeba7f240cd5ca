"""The store: corpus readers, embedders and their cache, the data directory, SQLite tables, documents' labels and
retrieval filters, FAISS index and snapshots, ingestion.

May import numpy, faiss and sentence-transformers, never the model (attention_core), server, batch or client.
Submodules import what they need, so ``import nextpara.store`` itself is cheap.
"""
